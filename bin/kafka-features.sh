#!/usr/bin/env bash
# kafka-features.sh for Gregor: runs `gregor features` with Kafka's flags (--bootstrap-server,
# --command-config) and verbs: describe, upgrade --feature NAME=LEVEL, downgrade --feature
# NAME=LEVEL [--unsafe], disable --feature NAME [--unsafe], each with --dry-run. Gregor's one
# feature is transaction.version (0-2). See docs/cli.md.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib/kafka-tool.sh
. "$(dirname "$(readlink -f "$0")")/lib/kafka-tool.sh"
KAFKA_TOOL_ARGS=("$@")
kafka_tool_unsupported --bootstrap-controller "Gregor's tools talk to brokers: use --bootstrap-server HOST:PORT"
kafka_tool_unsupported --release-version "Gregor has no metadata.version: use --feature transaction.version=N"
kafka_tool_unsupported --metadata "Gregor has no metadata.version: use --feature transaction.version=N"
for a in "$@"; do
  case "$a" in
    version-mapping | feature-dependencies)
      kafka_tool_die "'$a' is not supported: Gregor has no metadata.version; its one feature is transaction.version (0-2)"
      ;;
  esac
done
kafka_tool_run features -- "$@"
