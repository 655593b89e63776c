#!/usr/bin/env bash
# Long soak of the deterministic simulation: thousands of replicated seeds with every fault and
# workload the simulator has, each seed in a process of its own, node files on tmpfs.
#
#   scripts/sim-soak.sh [SEEDS] [FROM]          # default: 10000 seeds from 0
#   FLAGS="--power-loss --disk-faults" scripts/sim-soak.sh 1000
#   PROFILE=dev JOBS=2 scripts/sim-soak.sh 100 500
#
# Writes one JSON outcome per seed to sim-soak-<from>-<to>.jsonl in the current directory,
# prints each failing seed as it comes and a summary line at the end. Replay a failing seed with
#   cargo run -p gregor-sim --release -- --replication <the same flags> --seed S --trace
set -euo pipefail
here=$PWD
cd "$(dirname "$0")/.."

seeds=${1:-10000}
from=${2:-0}
flags=${FLAGS:---power-loss --disk-faults --groups --admin --slow-disk --clock-jumps --cascading-crashes --topic-admin --splits --bridges --overlaps --static-members --stalls}
jobs=${JOBS:-$(nproc)}
# PROFILE=dev reuses the test build (slower seeds, no release build to wait for).
profile=${PROFILE:-release}

cargo build --profile "$profile" -p gregor-sim --bins
subdir=$([ "$profile" = dev ] && echo debug || echo "$profile")
exe="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/$subdir/gregor-sim"

# Node files on tmpfs where there is one: the soak is bound by fsyncs otherwise.
if [ -d /dev/shm ] && [ -w /dev/shm ]; then
    export TMPDIR=/dev/shm
fi

out="$here/sim-soak-${from}-$((from + seeds - 1)).jsonl"
echo "gregor-sim --replication $flags --from $from --seeds $seeds --jobs $jobs > $out" >&2
# shellcheck disable=SC2086 # the flags are words
"$exe" --replication $flags --from "$from" --seeds "$seeds" --jobs "$jobs" --json \
    | tee "$out" \
    | python3 -c '
import json, sys
for line in sys.stdin:
    try:
        o = json.loads(line)
    except ValueError:
        print(line.strip(), flush=True)  # a seed whose child process failed or hung
        continue
    if "summary" in o:
        print(o["summary"])
    for v in o.get("violations", []):
        print("seed %s FAIL %s: %s" % (o["seed"], v["property"], v["detail"]), flush=True)
'

