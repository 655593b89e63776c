#!/usr/bin/env bash
# kafka-python's own integration tests (test/integration of its source distribution) against a
# Gregor broker this script starts on a free loopback port.
#
#   scripts/compat/kafka-python.sh [PYTEST ARGS...]
#
# The kafka-python version is the one e2e/requirements.txt pins. Its source distribution is
# downloaded with pip into target/compat/kafka-python/ (nothing of it is committed). The sdist
# ships the integration tests but not two files they import: test/__init__.py (without it
# Python's own `test` package is found instead) and test/service.py (the broker process
# wrappers); the script adds an empty package marker and a stand-in for the external-broker case
# (KAFKA_URI), which is the only one used here. The tests run in a virtualenv (system packages
# visible) with pytest-mock, pytest-timeout and the compression libraries; KAFKA_ROOT is this
# checkout, so the fixtures' `bin/kafka-topics.sh --list` runs Gregor's tools. SASL and SSL tests
# are deselected: their fixtures start a broker of their own with those listeners, which a run
# against an external broker cannot. Results: docs/compatibility.md.
#
# The gregor binary: $GREGOR_BIN, else `gregor` on PATH, else this checkout's target/release or
# target/debug build (bin/lib/gregor-binary.sh).
set -euo pipefail

ROOT="$(cd "$(dirname "$(readlink -f "$0")")/../.." && pwd)"
WORK="$ROOT/target/compat/kafka-python"

die() {
  echo "kafka-python.sh: $*" >&2
  exit 1
}

version="$(sed -n 's/^kafka-python==\([^ #]*\).*/\1/p' "$ROOT/e2e/requirements.txt")"
[ -n "$version" ] || die "no kafka-python pin in e2e/requirements.txt"
src="$WORK/kafka_python-$version"

# shellcheck source=bin/lib/gregor-binary.sh
. "$ROOT/bin/lib/gregor-binary.sh"
gregor="$(gregor_binary "$ROOT")" || die "no gregor binary to run"

mkdir -p "$WORK"
if [ ! -d "$src/test/integration" ]; then
  echo "kafka-python.sh: downloading kafka-python $version's source distribution" >&2
  python3 -m pip download -q --no-deps --no-binary :all: "kafka-python==$version" -d "$WORK" \
    || die "pip download of kafka-python $version failed"
  tar -xzf "$WORK/kafka_python-$version.tar.gz" -C "$WORK"
  [ -d "$src/test/integration" ] || die "kafka-python $version's sdist has no test/integration"
fi
touch "$src/test/__init__.py"
if [ ! -f "$src/test/service.py" ]; then
  cat >"$src/test/service.py" <<'EOF'
# Stand-in for kafka-python's test/service.py, which its source distribution does not ship:
# only the external broker (KAFKA_URI) is used.
class ExternalService:
    def __init__(self, host, port):
        self.host, self.port = host, port

    def open(self):
        pass

    def close(self):
        pass

    def stop(self):
        pass

    def dump_logs(self):
        pass

    def wait_for(self, *args, **kwargs):
        return True


class SpawnedService:
    def __init__(self, *args, **kwargs):
        raise RuntimeError("this run uses an external broker (KAFKA_URI)")
EOF
fi

venv="$WORK/venv"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv --system-site-packages "$venv"
fi
"$venv/bin/python" -m pip install -q --disable-pip-version-check \
  pytest-mock pytest-timeout lz4 zstandard python-snappy \
  || die "installing the test plugins into $venv failed"

run="$(mktemp -d "$WORK/run-XXXXXX")"
port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
gregor_pid=""
stop_gregor() {
  if [ -n "$gregor_pid" ] && kill -0 "$gregor_pid" 2>/dev/null; then
    kill -TERM "$gregor_pid" 2>/dev/null || true
    wait "$gregor_pid" 2>/dev/null || true
  fi
  gregor_pid=""
}
trap stop_gregor EXIT
trap 'stop_gregor; exit 130' INT TERM HUP

# Node id 0 and advertised listeners as the fixtures' own broker has them; short group session
# timeouts as their tests use; an authorizer that allows what no ACL names, as the fixtures'
# broker has (without one, the ACL APIs answer SECURITY_DISABLED, as Kafka's do).
"$gregor" broker --listeners "PLAINTEXT://127.0.0.1:$port" \
  --advertised-listeners "PLAINTEXT://127.0.0.1:$port" --node-id 0 --data-dir "$run/data" \
  --override num.partitions=4 --override group.initial.rebalance.delay.ms=0 \
  --override group.min.session.timeout.ms=1000 \
  --override authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer \
  --override allow.everyone.if.no.acl.found=true >"$run/gregor.log" 2>&1 &
gregor_pid=$!
for _ in $(seq 100); do
  if (echo >"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then break; fi
  kill -0 "$gregor_pid" 2>/dev/null || die "gregor exited at start-up (log: $run/gregor.log)"
  sleep 0.1
done

status=0
(cd "$src" && GREGOR_BIN="$gregor" KAFKA_ROOT="$ROOT" KAFKA_VERSION=4.0.0 \
  KAFKA_URI="PLAINTEXT://127.0.0.1:$port" \
  "$venv/bin/python" -m pytest -q -p no:cacheprovider test/integration --timeout 120 \
  -o log_level=WARNING -k "not sasl and not ssl" -rfEs --tb=line "$@") || status=$?
stop_gregor
rm -rf "$run/data"
echo "kafka-python.sh: broker log in $run/gregor.log" >&2
exit "$status"
