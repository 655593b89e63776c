#!/usr/bin/env bash
# Start-up and shutdown time of one node with many partitions.
#   bench/lifecycle.sh [PARTITIONS] [THREADS] [GREGOR_BINARY]
# Creates a topic with PARTITIONS partitions on a fresh node (one record in one of them), then
# times: the CreateTopics call; SIGTERM until the process exits (every log closed cleanly);
# start-up until the node listens (after the clean shutdown); start-up after a SIGKILL.
# THREADS is num.recovery.threads.per.data.dir. Needs kcat.
set -euo pipefail
N=${1:-1000}
T=${2:-16}
G=${3:-target/release/gregor}
PORT=${PORT:-19393}
DIR=$(mktemp -d)
trap 'kill -9 $BP 2>/dev/null || true; rm -rf "$DIR"' EXIT
now() { date +%s.%N; }
since() { echo "$(now) - $1" | bc; }
start() {
  "$G" broker --data-dir "$DIR/data" --listeners "PLAINTEXT://127.0.0.1:$PORT" \
    --override "num.recovery.threads.per.data.dir=$T" >"$DIR/broker-$1.log" 2>&1 &
  BP=$!
  local t0; t0=$(now)
  until grep -q "listening" "$DIR/broker-$1.log"; do
    kill -0 $BP 2>/dev/null || { cat "$DIR/broker-$1.log" >&2; exit 1; }
    sleep 0.01
  done
  ELAPSED=$(since "$t0")
}
start first
t0=$(now)
"$G" topics --bootstrap-server "127.0.0.1:$PORT" --create --topic lifecycle --partitions "$N" >/dev/null
echo "create_topic_s $(since "$t0")"
echo x | kcat -b "127.0.0.1:$PORT" -t lifecycle -P -p 0
t0=$(now); kill -TERM $BP; wait $BP || true
echo "clean_shutdown_s $(since "$t0")"
start second; echo "start_after_clean_shutdown_s $ELAPSED"
kill -KILL $BP; wait $BP 2>/dev/null || true
start third; echo "start_after_sigkill_s $ELAPSED"
kill -TERM $BP; wait $BP || true
