# shellcheck shell=bash
# Sourced (not run) by bin/lib/kafka-tool.sh and the scripts in scripts/compat/: which `gregor`
# binary they run.
#
# gregor_binary ROOT: prints the binary's absolute path: $GREGOR_BIN, else `gregor` on PATH
# (an installed one), else ROOT's target/release/gregor, else ROOT's target/debug/gregor.
# Prints why to stderr and returns 1 when there is none.
gregor_binary() {
  local root="$1" found=""
  if [ -n "${GREGOR_BIN:-}" ]; then
    if [ ! -x "$GREGOR_BIN" ]; then
      echo "GREGOR_BIN=$GREGOR_BIN is not an executable file" >&2
      return 1
    fi
    found="$GREGOR_BIN"
  elif command -v gregor >/dev/null 2>&1; then
    found="$(command -v gregor)"
  elif [ -x "$root/target/release/gregor" ]; then
    found="$root/target/release/gregor"
  elif [ -x "$root/target/debug/gregor" ]; then
    found="$root/target/debug/gregor"
  else
    echo "cannot find the gregor binary: set GREGOR_BIN, put gregor on PATH, or build it in" \
      "$root (cargo build --release -p gregor-cli)" >&2
    return 1
  fi
  readlink -f "$found"
}
