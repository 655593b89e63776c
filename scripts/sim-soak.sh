#!/usr/bin/env bash
# Long soak of the deterministic simulation: thousands of replicated seeds with every fault and
# workload the simulator has, each seed in a process of its own, node files on tmpfs.
#
#   scripts/sim-soak.sh [SEEDS] [FROM]          # default: 10000 seeds from 0
#   FLAGS="--power-loss --disk-faults" scripts/sim-soak.sh 1000
#   PROFILE=dev JOBS=2 scripts/sim-soak.sh 100 500
#   SIM_BIN=/path/to/gregor-sim scripts/sim-soak.sh 500   # no build: that binary
#
# Writes one JSON outcome per seed to sim-soak-<from>-<to>.jsonl in the current directory,
# prints each failing seed as it comes and a summary line at the end, and writes the summary as
# JSON to sim-soak-<from>-<to>.summary.json (SUMMARY=path to put it elsewhere): seeds, flags,
# passed, failed_seeds, per-property counts of failing seeds, wall_s, seeds_per_s, and the
# child processes that failed or hung. Replay a failing seed with
#   cargo run -p gregor-sim --release -- --replication <the same flags> --seed S --trace
set -euo pipefail
here=$PWD
cd "$(dirname "$0")/.."

seeds=${1:-10000}
from=${2:-0}
flags=${FLAGS:---power-loss --disk-faults --groups --admin --slow-disk --clock-jumps --cascading-crashes --topic-admin --splits --bridges --overlaps --static-members --stalls --acls --quotas --transactions}
jobs=${JOBS:-$(nproc)}
# PROFILE=dev reuses the test build (slower seeds, no release build to wait for).
profile=${PROFILE:-release}

if [ -n "${SIM_BIN:-}" ]; then
    # A binary built earlier (say, of a commit while the tree has moved on).
    exe=$SIM_BIN
else
    cargo build --profile "$profile" -p gregor-sim --bins
    subdir=$([ "$profile" = dev ] && echo debug || echo "$profile")
    exe="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/$subdir/gregor-sim"
fi

# Node files on tmpfs where there is one: the soak is bound by fsyncs otherwise.
if [ -d /dev/shm ] && [ -w /dev/shm ]; then
    export TMPDIR=/dev/shm
fi

out="$here/sim-soak-${from}-$((from + seeds - 1)).jsonl"
summary="${SUMMARY:-$here/sim-soak-${from}-$((from + seeds - 1)).summary.json}"
echo "gregor-sim --replication $flags --from $from --seeds $seeds --jobs $jobs > $out" >&2
started=$(date +%s.%N)
status=0
# shellcheck disable=SC2086 # the flags are words
"$exe" --replication $flags --from "$from" --seeds "$seeds" --jobs "$jobs" --json \
    | tee "$out" \
    | STARTED="$started" FLAGS_USED="$flags" SUMMARY_PATH="$summary" JOBS="$jobs" python3 -c '
import json, os, re, sys, time
def kebab(name):
    # The outcome names a property as its Rust variant; the report uses the checker names.
    return re.sub(r"(?<!^)(?=[A-Z])", "-", name).lower()
seeds = passed = 0
failed, child_errors, properties = [], [], {}
for line in sys.stdin:
    try:
        o = json.loads(line)
    except ValueError:
        # A seed whose child process failed or hung.
        print(line.strip(), flush=True)
        m = re.search(r"seed (\d+)", line)
        child_errors.append(line.strip())
        if m:
            seeds += 1
            failed.append(int(m.group(1)))
        properties["child-error"] = properties.get("child-error", 0) + 1
        continue
    if "summary" in o:
        print(o["summary"])
        continue
    seeds += 1
    violations = o.get("violations", [])
    if not violations:
        passed += 1
        continue
    failed.append(o["seed"])
    for p in sorted({kebab(v["property"]) for v in violations}):
        properties[p] = properties.get(p, 0) + 1
    for v in violations:
        print("seed %s FAIL %s: %s" % (o["seed"], kebab(v["property"]), v["detail"]), flush=True)
wall = time.time() - float(os.environ["STARTED"])
summary = {
    "seeds": seeds,
    "flags": ["--replication"] + os.environ["FLAGS_USED"].split(),
    "jobs": int(os.environ["JOBS"]),
    "passed": passed,
    "failed_seeds": sorted(failed),
    "properties": dict(sorted(properties.items())),
    "child_errors": child_errors,
    "wall_s": round(wall, 1),
    "seeds_per_s": round(seeds / wall, 3) if wall > 0 else None,
}
with open(os.environ["SUMMARY_PATH"], "w") as f:
    json.dump(summary, f, indent=2)
    f.write("\n")
print("summary: %s" % os.environ["SUMMARY_PATH"], file=sys.stderr)
' || status=$?
exit "$status"
