#!/usr/bin/env bash
# The whole test suite, on a fresh machine as well: installs what the end-to-end tests need when
# it is missing (kcat, and headless Chromium for the console tests, from Debian's packages;
# confluent-kafka, kafka-python and pytest from PyPI, pinned in e2e/requirements.txt; kafkajs
# with npm, pinned in e2e/package-lock.json; a C/C++
# toolchain, pkg-config, the openssl command and the zlib / OpenSSL / zstd headers that librdkafka's test subset is
# built with, crates/gregor-cli/tests/librdkafka_compat.rs), then runs `cargo test --workspace`.
# Extra arguments go to cargo test.
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

missing=()
command -v kcat >/dev/null 2>&1 || missing+=(kcat)
# e2e/test_console.py drives the web console in headless Chromium (Debian's package).
command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 \
  || missing+=(chromium)
# librdkafka's own test subset (scripts/compat/librdkafka.sh --subset) is built from source.
for tool in gcc g++ make; do
  command -v "$tool" >/dev/null 2>&1 || { missing+=(build-essential); break; }
done
command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
# The PKCS12 store tests (gregor-client, gregor-broker, e2e/test_pkcs12.py) make stores with it.
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
for lib in zlib:zlib1g-dev libssl:libssl-dev libzstd:libzstd-dev; do
  if ! command -v pkg-config >/dev/null 2>&1 || ! pkg-config --exists "${lib%%:*}"; then
    missing+=("${lib#*:}")
  fi
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "test.sh: installing ${missing[*]}" >&2
  as_root apt-get update -q
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"
fi

if ! python3 - <<'PY' >/dev/null 2>&1
import importlib.metadata as m, pathlib, re, sys
for line in pathlib.Path("e2e/requirements.txt").read_text().splitlines():
    line = line.split("#")[0].strip()
    if not line:
        continue
    name, _, version = line.partition("==")
    if m.version(name) != version:
        sys.exit(1)
PY
then
  echo "test.sh: installing the e2e suite's Python packages" >&2
  python3 -m pip install -q --disable-pip-version-check -r e2e/requirements.txt
fi

# kafkajs for e2e/test_secure_clients.py, at the version e2e/package-lock.json pins.
if [ ! -d e2e/node_modules/kafkajs ]; then
  echo "test.sh: installing the e2e suite's node packages" >&2
  (cd e2e && npm ci --ignore-scripts --no-audit --no-fund)
fi

exec cargo test --workspace "$@"
