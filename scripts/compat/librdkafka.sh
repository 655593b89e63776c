#!/usr/bin/env bash
# librdkafka's own test suite as Gregor's report card.
#
#   scripts/compat/librdkafka.sh [--cluster] [--group-protocol consumer] [--tests LIST [--record]]
#                                [--subset] [--time-limit S]
#   scripts/compat/librdkafka.sh --report
#
# Takes librdkafka's source from the rdkafka-sys crate (through cargo, into cargo's own cache;
# nothing is added to the workspace), builds the library and its test runner once under
# target/compat/, starts Gregor itself on free loopback ports (one `gregor broker`, or
# `gregor cluster up --nodes 3 --racks 3` with --cluster; for the SASL tests 0135 and 0142 a
# Gregor with a SASL_PLAINTEXT listener: one `gregor broker`, or three `gregor broker`
# processes with --cluster) and runs the suite's broker-facing
# tests one test number at a time, each under a time limit (scripts/compat/librdkafka_suite.py
# plans, runs and judges them).
#
# A full run (no --tests, no --subset) records its results in target/compat/results-<topology>.json
# and rewrites docs/compatibility.md from the results of both topologies; it exits 0 once the
# report is written, whatever the tests did (failures are what the report is for). --tests and
# --subset (the quick tests CI runs) leave the report alone and exit 1 if any test fails;
# --tests LIST --record puts the new results of those tests into the recorded run of the
# topology and rewrites the report (after a fix, say).
# --report rewrites docs/compatibility.md from the recorded results without running anything.
# --group-protocol consumer runs the consumers with KIP-848's protocol
# (TEST_CONSUMER_GROUP_PROTOCOL=consumer); its runs are recorded apart, in
# target/compat/results-<topology>-consumer.json, and summarized by hand in docs/compatibility.md
# (the generated report covers the classic protocol).
#
# The gregor binary: $GREGOR_BIN, else `gregor` on PATH, else this checkout's target/release or
# target/debug build (bin/lib/gregor-binary.sh).
# Needs gcc, g++, make, pkg-config, python3 and the zlib / OpenSSL / zstd development headers
# (scripts/test.sh installs them on Debian).
set -euo pipefail

ROOT="$(cd "$(dirname "$(readlink -f "$0")")/../.." && pwd)"
CRATE_VERSION="4.10.0"
LIBRDKAFKA_VERSION="2.12.1"
CRATE="rdkafka-sys-${CRATE_VERSION}+${LIBRDKAFKA_VERSION}"
WORK="$ROOT/target/compat"
SRC="$WORK/src/$CRATE/librdkafka"
SUITE="$ROOT/scripts/compat/librdkafka_suite.py"
DOC="$ROOT/docs/compatibility.md"

die() {
  echo "librdkafka.sh: $*" >&2
  exit 1
}

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed -n 's/^# \{0,1\}//p'
  exit "${1:-0}"
}

topology=single
group_protocol=classic
tests=""
subset=0
report_only=0
record=0
time_limit=300
while [ $# -gt 0 ]; do
  case "$1" in
    --cluster) topology=cluster ;;
    --subset) subset=1 ;;
    --group-protocol)
      [ $# -gt 1 ] || die "--group-protocol needs classic or consumer"
      group_protocol="$2"
      shift
      ;;
    --tests)
      [ $# -gt 1 ] || die "--tests needs a list of test numbers, e.g. 0001,0012"
      tests="$2"
      shift
      ;;
    --tests=*) tests="${1#*=}" ;;
    --time-limit)
      [ $# -gt 1 ] || die "--time-limit needs seconds"
      time_limit="$2"
      shift
      ;;
    --report) report_only=1 ;;
    --record) record=1 ;;
    -h | --help) usage 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
  shift
done
[ -z "$tests" ] || [ "$subset" -eq 0 ] || die "--tests and --subset cannot be combined"
[ "$record" -eq 0 ] || [ -n "$tests" ] || die "--record goes with --tests"
case "$time_limit" in '' | *[!0-9]*) die "--time-limit must be a number of seconds" ;; esac
case "$group_protocol" in classic | consumer) ;; *) die "--group-protocol is classic or consumer" ;; esac

report() {
  python3 "$SUITE" report --librdkafka "$SRC" --time-limit "$time_limit" \
    --single "$WORK/results-single.json" --cluster "$WORK/results-cluster.json" --out "$DOC"
}

if [ "$report_only" -eq 1 ]; then
  [ -f "$SRC/tests/test.c" ] || die "no librdkafka source in $SRC: run a full run first"
  report
  exit 0
fi

# Prerequisites: fail (never skip) with what to install.
missing=()
for tool in cargo python3 gcc g++ make pkg-config; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
[ ${#missing[@]} -eq 0 ] \
  || die "missing ${missing[*]}: install build-essential pkg-config python3 (scripts/test.sh does)"

# 1. librdkafka's source, through cargo: a throwaway manifest outside the workspace whose only
# dependency is rdkafka-sys; `cargo fetch` puts the .crate in cargo's cache.
cargo_home="${CARGO_HOME:-$HOME/.cargo}"
find_crate() {
  compgen -G "$cargo_home/registry/cache/*/$CRATE.crate" | head -n 1 || true
}
crate_file="$(find_crate)"
if [ -z "$crate_file" ]; then
  echo "librdkafka.sh: fetching $CRATE through cargo" >&2
  mkdir -p "$WORK/fetch/src"
  cat >"$WORK/fetch/Cargo.toml" <<EOF
[package]
name = "gregor-compat-fetch"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
rdkafka-sys = { version = "=$CRATE_VERSION", default-features = false }

[workspace]
EOF
  echo 'fn main() {}' >"$WORK/fetch/src/main.rs"
  cargo fetch --manifest-path "$WORK/fetch/Cargo.toml" >&2 \
    || die "cargo fetch of rdkafka-sys $CRATE_VERSION failed"
  crate_file="$(find_crate)"
  [ -n "$crate_file" ] || die "cargo fetched rdkafka-sys, but $CRATE.crate is not in $cargo_home/registry/cache"
fi

# 2. Build once: the library and the test runner, cached under target/compat/.
stamp="$WORK/built-$CRATE"
if [ ! -f "$stamp" ] || [ ! -x "$SRC/tests/test-runner" ]; then
  echo "librdkafka.sh: building librdkafka $LIBRDKAFKA_VERSION and its test runner (log: $WORK/build.log)" >&2
  rm -rf "$WORK/src/$CRATE"
  mkdir -p "$WORK/src"
  tar -xzf "$crate_file" -C "$WORK/src" "$CRATE/librdkafka"
  jobs="$(nproc 2>/dev/null || echo 2)"
  # --disable-sasl leaves out Cyrus SASL (GSSAPI) only: PLAIN is always built, and SCRAM and
  # OAUTHBEARER come with OpenSSL, which the SASL tests log in with.
  if ! (cd "$SRC" && ./configure --disable-curl --disable-sasl \
    && make -j"$jobs" libs && make -j"$jobs" -C tests build) >"$WORK/build.log" 2>&1; then
    tail -n 30 "$WORK/build.log" >&2
    die "building librdkafka failed (log: $WORK/build.log); needs zlib1g-dev libssl-dev libzstd-dev"
  fi
  touch "$stamp"
fi

# 3. Gregor.
# shellcheck source=bin/lib/gregor-binary.sh
. "$ROOT/bin/lib/gregor-binary.sh"
gregor="$(gregor_binary "$ROOT")" || die "no gregor binary to run"

# 4. Run. The runner starts and stops Gregor; if this script is interrupted, the runner is
# stopped too (it stops Gregor on SIGTERM).
full=0
args=(run --librdkafka "$SRC" --version "$LIBRDKAFKA_VERSION" --gregor "$gregor" --repo "$ROOT"
  --workdir "$WORK" --topology "$topology" --time-limit "$time_limit"
  --group-protocol "$group_protocol")
recorded="$WORK/results-$topology.json"
[ "$group_protocol" = classic ] || recorded="$WORK/results-$topology-$group_protocol.json"
if [ "$subset" -eq 1 ]; then
  args+=(--subset)
elif [ -n "$tests" ]; then
  args+=(--tests "$tests")
  if [ "$record" -eq 1 ]; then
    [ -f "$recorded" ] || die "no recorded $topology run to add to: run the full suite first"
    args+=(--results "$recorded" --merge)
  fi
else
  full=1
  args+=(--results "$recorded")
fi

runner_pid=""
stop_runner() {
  if [ -n "$runner_pid" ] && kill -0 "$runner_pid" 2>/dev/null; then
    kill -TERM "$runner_pid" 2>/dev/null || true
    wait "$runner_pid" 2>/dev/null || true
  fi
}
trap stop_runner EXIT
trap 'stop_runner; exit 130' INT TERM HUP

python3 "$SUITE" "${args[@]}" &
runner_pid=$!
status=0
wait "$runner_pid" || status=$?
runner_pid=""

if [ "$group_protocol" = consumer ] && { [ "$full" -eq 1 ] || [ "$record" -eq 1 ]; }; then
  [ "$status" -le 1 ] || die "the test run failed (status $status)"
  echo "librdkafka.sh: results in $recorded" >&2
  exit 0
fi
if [ "$full" -eq 1 ] || [ "$record" -eq 1 ]; then
  # 1 = some tests failed, which a full run reports; anything else is the runner's own failure.
  [ "$status" -le 1 ] || die "the test run failed (status $status)"
  report
  exit 0
fi
exit "$status"
