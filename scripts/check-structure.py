#!/usr/bin/env python3
"""Fails when the inside of a crate loses its shape: an import cycle between the files of a
crate, a file importing a module of a higher layer than its own, or a product function over
100 lines.

Layers come from each crate's README: a "Layers" section whose list items read
`- name: module, module, ...`, top layer first (a module is a path under src/ without `.rs`;
`metrics` names metrics/mod.rs and, unless listed on its own, every file under metrics/). A
file may import its own layer and the layers below it. The crate root (lib.rs, main.rs) wires
the modules together and sits above every layer.

Imports are read from the source text: `use` trees and inline `crate::`, `super::`, `self::`
and child-module paths, following `pub use` re-exports. Test code (`#[cfg(test)]` items and
the files they declare) is left out.

Usage: scripts/check-structure.py [--verbose]    (from anywhere in the checkout)
Known debts that must only shrink are listed in scripts/structure-debts.txt.
"""

import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAX_FN_LINES = 100


# ---- reading Rust source ---------------------------------------------------------------------

def strip_comments_and_strings(text):
    """The source with comments, string and char literals blanked, lines kept in place."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif c == "r" and re.match(r'r#*"', text[i:i + 10]) and not re.match(r"\w", text[i - 1:i] or " "):
            hashes = re.match(r'r(#*)"', text[i:]).group(1)
            end = text.find('"' + hashes, i + len(hashes) + 2)
            end = n if end < 0 else end + 1 + len(hashes)
            out.append('""' + "\n" * text.count("\n", i, end))
            i = end
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j + 1
        elif c == "'":
            m = re.match(r"'(\\.|\\u\{[0-9a-fA-F]+\}|[^\\'])'", text[i:i + 12])
            if m:
                out.append("' '")
                i += len(m.group(0))
            else:  # a lifetime
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def matching_brace(text, open_at):
    depth = 0
    for j in range(open_at, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return j
    return len(text) - 1


CFG_TEST = re.compile(r"#\[cfg\((?:test|all\(test[^\]]*)\)\]")


def strip_test_items(code):
    """`code` without the items under `#[cfg(test)]`, and the names of test-only child modules."""
    test_mods = set()
    while True:
        m = CFG_TEST.search(code)
        if not m:
            return code, test_mods
        rest = code[m.end():]
        decl = re.match(r"\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", rest)
        if decl:
            test_mods.add(decl.group(1))
            end = m.end() + decl.end()
        else:
            semi, brace = rest.find(";"), rest.find("{")
            if brace >= 0 and (semi < 0 or brace < semi):
                end = matching_brace(code, m.end() + brace) + 1
            else:
                end = m.end() + (semi + 1 if semi >= 0 else len(rest))
        code = code[:m.start()] + "\n" * code.count("\n", m.start(), end) + code[end:]


def expand_use_tree(tree):
    """`a::{b, c::{d as e}}` -> [([a, b], b), ([a, c, d], e)]: each path with the name it binds."""
    tree = re.sub(r"\s*(::|[{},])\s*", r"\1", tree.strip())
    brace = tree.find("{")
    if brace < 0:
        path, _, alias = tree.partition(" as ")
        segs = [s for s in path.strip().split("::") if s]
        return [(segs, alias.strip() or (segs[-1] if segs else ""))]
    prefix = [s for s in tree[:brace].split("::") if s]
    inner, depth, parts, start = tree[brace + 1:tree.rfind("}")], 0, [], 0
    for k, ch in enumerate(inner):
        depth += ch == "{"
        depth -= ch == "}"
        if ch == "," and depth == 0:
            parts.append(inner[start:k])
            start = k + 1
    parts.append(inner[start:])
    out = []
    for p in parts:
        if p == "self":
            out.append((list(prefix), prefix[-1] if prefix else ""))
        elif p:
            out += [(prefix + segs, name) for segs, name in expand_use_tree(p)]
    return out


USE = re.compile(r"(?:^|[;{}\s])(pub(?:\([^)]*\))?\s+)?use\s+([^;]+);")
INLINE = re.compile(r"(?<![\w:])(crate|super|self)((?:::\w+)+)")
MOD_DECL = re.compile(r"(?:^|[;{}\s])(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;")


class Module:
    def __init__(self, crate, path, file):
        self.crate, self.path, self.file = crate, path, file
        self.is_dir = os.path.basename(file) in ("mod.rs", "lib.rs", "main.rs")
        text = open(file, errors="replace").read()
        self.raw = text
        code = strip_comments_and_strings(text)
        self.code, test_mods = strip_test_items(code)
        self.children = [c for c in MOD_DECL.findall(self.code) if c not in test_mods]
        self.uses = []       # segments of every `use` path
        self.reexports = {}  # name -> segments, from `pub use`
        self.globs = []      # module paths of `pub use path::*`
        for m in USE.finditer(self.code):
            for segs, name in expand_use_tree(m.group(2)):
                self.uses.append(segs)
                if m.group(1) and segs and name == "*":
                    self.globs.append(segs[:-1])
                elif m.group(1) and segs and name != "_":
                    self.reexports[name] = segs
        self.inline = [[r] + [s for s in rest.split("::") if s] for r, rest in INLINE.findall(self.code)]
        kids = "|".join(map(re.escape, self.children))
        self.child_paths = (
            [[m.group(1)] + m.group(2).split("::")[1:]
             for m in re.finditer(r"(?<![\w:])(%s)((?:::\w+)+)" % kids, self.code)]
            if kids else [])


def defines(module, name):
    """Whether `module` defines an item called `name` itself."""
    return re.search(r"\b(fn|struct|enum|trait|type|const|static|mod|union|macro_rules!)\s+%s\b"
                     % re.escape(name), module.code) is not None


def roots_of(crate_dir):
    """The crate's targets: the library, the main binary and src/bin/*.rs, each its own tree."""
    src = os.path.join(crate_dir, "src")
    roots = [os.path.join(src, f) for f in ("lib.rs", "main.rs") if os.path.exists(os.path.join(src, f))]
    bins = os.path.join(src, "bin")
    if os.path.isdir(bins):
        roots += [os.path.join(bins, f) for f in sorted(os.listdir(bins)) if f.endswith(".rs")]
    return roots


class Crate:
    def __init__(self, dir_, root):
        self.dir, self.name = dir_, os.path.basename(dir_)
        self.modules = {}
        self.load((), root)

    def load(self, path, file):
        m = Module(self, path, file)
        self.modules[path] = m
        base = os.path.dirname(file) if m.is_dir else file[:-3]
        for child in m.children:
            for cand in (os.path.join(base, child + ".rs"), os.path.join(base, child, "mod.rs")):
                if os.path.exists(cand):
                    self.load(path + (child,), cand)
                    break

    def rel(self, module):
        return os.path.relpath(module.file, os.path.join(self.dir, "src"))

    def resolve(self, start, segs, depth=0):
        """The module a path names, starting from module path `start` (following re-exports)."""
        if depth > 4 or not segs:
            return None
        path, rest = tuple(start), list(segs)
        if rest[0] == "crate":
            path, rest = (), rest[1:]
        while rest and rest[0] in ("self", "super"):
            if rest[0] == "super":
                path = path[:-1]
            rest = rest[1:]
        while rest and path + (rest[0],) in self.modules:
            path, rest = path + (rest[0],), rest[1:]
        target = self.modules.get(path)
        if target and rest and rest[0] in target.reexports:
            again = self.resolve(path, target.reexports[rest[0]], depth + 1)
            if again is not None:
                return again
        if target and rest and not defines(target, rest[0]):
            # `pub use child::*`: the module whose glob brings the name in.
            for glob_path in target.globs:
                again = self.resolve(path, glob_path, depth + 1)
                if again in self.modules and defines(self.modules[again], rest[0]):
                    return again
        return path

    def edges(self):
        """File-to-file imports; the crate root wires modules together and takes part in none."""
        out = {p: set() for p in self.modules}
        for p, m in self.modules.items():
            if p == ():
                continue
            for segs in m.uses + m.inline + m.child_paths:
                if not segs or (segs[0] not in ("crate", "super", "self") and segs[0] not in m.children):
                    continue
                t = self.resolve(p, segs)
                if t is not None and t != p and t != () and t in self.modules:
                    out[p].add(t)
        return out


def sccs(graph):
    index, low, on, stack, comps, counter = {}, {}, set(), [], [], [0]
    sys.setrecursionlimit(20000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return comps


# ---- layers ----------------------------------------------------------------------------------

def layers_of(crate_dir):
    """[(layer name, [module paths])] from the README's Layers section, top first; None if absent."""
    readme = os.path.join(crate_dir, "README.md")
    if not os.path.exists(readme):
        return None
    lines = open(readme).read().split("\n")
    start = next((i for i, l in enumerate(lines) if re.match(r"#+\s*Layers\b", l)), None)
    if start is None:
        return None
    out = []
    for line in lines[start + 1:]:
        if line.startswith("#"):
            break
        m = re.match(r"\s*[-*]\s*([\w -]+?):\s*(.+)$", line)
        if m:
            mods = [tuple(x.strip().strip("`").split("/")) for x in m.group(2).split(",") if x.strip()]
            out.append((m.group(1).strip(), mods))
    return out


def layer_index(layers, path):
    best, best_len = None, -1
    for i, (_, mods) in enumerate(layers):
        for mod in mods:
            if path[:len(mod)] == mod and len(mod) > best_len:
                best, best_len = i, len(mod)
    return best


# ---- long functions --------------------------------------------------------------------------

FN = re.compile(r"^[ \t]*(?:pub(?:\([^)]*\))?\s+)?(?:const\s+)?(?:async\s+)?(?:unsafe\s+)?(?:extern\s+\"[^\"]*\"\s+)?fn\s+(\w+)", re.M)


def body_start(code, at):
    """Where the body of the fn whose signature starts at `at` opens, or None for a declaration."""
    depth = 0
    for j in range(at, len(code)):
        ch = code[j]
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        elif depth == 0 and ch == ";":
            return None
        elif depth == 0 and ch == "{":
            return j
    return None


def long_functions(module):
    code, out = module.code, []
    for m in FN.finditer(code):
        brace = body_start(code, m.end())
        if brace is None:
            continue
        end = matching_brace(code, brace)
        lines = code.count("\n", m.start(), end) + 1 - (code[m.start()] == "\n")
        if lines > MAX_FN_LINES:
            out.append((m.group(1), lines))
    return out


# ---- the check -------------------------------------------------------------------------------

def load_debts():
    """Known debts: `cycle CRATE FILE FILE ...` and `fn CRATE FILE NAME`."""
    cycles, fns = {}, set()
    path = os.path.join(ROOT, "scripts", "structure-debts.txt")
    if os.path.exists(path):
        for line in open(path):
            parts = line.split("#")[0].split()
            if parts[:1] == ["cycle"]:
                cycles.setdefault(parts[1], []).append(set(parts[2:]))
            elif parts[:1] == ["fn"]:
                fns.add(tuple(parts[1:4]))
    return cycles, fns


def is_test_file(rel):
    base = os.path.basename(rel)
    return base in ("tests.rs",) or base.endswith("_tests.rs") or "/tests/" in "/" + rel


def check_crate(crate_dir, debts, problems, used_debts, verbose):
    layered = False
    for root in roots_of(crate_dir):
        layered |= check_target(Crate(crate_dir, root), debts, problems, used_debts, verbose)
    return layered


def check_target(crate, debts, problems, used_debts, verbose):
    crate_dir = crate.dir
    graph = crate.edges()
    known_cycles, known_fns = debts
    for comp in sccs(graph):
        files = {crate.rel(crate.modules[p]) for p in comp}
        debt = next((i for i, k in enumerate(known_cycles.get(crate.name, [])) if files <= k), None)
        if debt is None:
            problems.append("%s: import cycle between %s" % (crate.name, ", ".join(sorted(files))))
        else:
            used_debts.add(("cycle", crate.name, debt))
    layers = layers_of(crate_dir)
    if layers is not None:
        for p, targets in sorted(graph.items()):
            if p == () or is_test_file(crate.rel(crate.modules[p])):
                continue
            mine = layer_index(layers, p)
            if mine is None:
                problems.append("%s: %s is in no layer of README.md's Layers"
                                % (crate.name, crate.rel(crate.modules[p])))
                continue
            for t in sorted(targets):
                theirs = layer_index(layers, t)
                if theirs is not None and theirs < mine:
                    problems.append("%s: %s (layer %s) imports %s (layer %s, above it)" % (
                        crate.name, crate.rel(crate.modules[p]), layers[mine][0],
                        crate.rel(crate.modules[t]), layers[theirs][0]))
    for p, m in sorted(crate.modules.items()):
        rel = crate.rel(m)
        if is_test_file(rel):
            continue
        for name, lines in long_functions(m):
            if (crate.name, rel, name) in known_fns:
                used_debts.add(("fn", crate.name, rel, name))
            else:
                problems.append("%s: fn %s in %s is %d lines (at most %d)"
                                % (crate.name, name, rel, lines, MAX_FN_LINES))
    if verbose:
        for p, targets in sorted(graph.items()):
            print("%s/%s -> %s" % (crate.name, crate.rel(crate.modules[p]),
                                   ", ".join(crate.rel(crate.modules[t]) for t in sorted(targets))))
    return layers is not None


def main():
    verbose = "--verbose" in sys.argv
    crates_dir = os.path.join(ROOT, "crates")
    debts = load_debts()
    problems, used = [], set()
    layered = []
    for name in sorted(os.listdir(crates_dir)):
        d = os.path.join(crates_dir, name)
        if os.path.isdir(os.path.join(d, "src")):
            if check_crate(d, debts, problems, used, verbose):
                layered.append(name)
    # A debt that is paid must leave the list, so it cannot come back unnoticed.
    for crate, entries in debts[0].items():
        for i, files in enumerate(entries):
            if ("cycle", crate, i) not in used:
                problems.append("structure-debts.txt: the cycle in %s (%s) is gone; remove its line"
                                % (crate, " ".join(sorted(files))))
    for crate, rel, name in sorted(debts[1]):
        if ("fn", crate, rel, name) not in used:
            problems.append("structure-debts.txt: fn %s in %s/%s is short now; remove its line"
                            % (name, crate, rel))
    for p in problems:
        print(p)
    print("check-structure: %d problem(s); layers checked in %s"
          % (len(problems), ", ".join(layered) or "no crate"))
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
