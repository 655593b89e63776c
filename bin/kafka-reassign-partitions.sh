#!/usr/bin/env bash
# kafka-reassign-partitions.sh for Gregor: runs `gregor reassign` with Kafka's flags
# (--bootstrap-server, --generate --topics-to-move-json-file F --broker-list 0,1,2,
# --execute / --verify / --cancel --reassignment-json-file F, --list, --throttle N,
# --additional, --preserve-throttles, --disable-rack-aware). See docs/cli.md.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib/kafka-tool.sh
. "$(dirname "$(readlink -f "$0")")/lib/kafka-tool.sh"
KAFKA_TOOL_ARGS=("$@")
kafka_tool_unsupported --zookeeper "Gregor has no ZooKeeper: use --bootstrap-server HOST:PORT"
kafka_tool_unsupported --bootstrap-controller "Gregor's tools talk to brokers: use --bootstrap-server HOST:PORT"
kafka_tool_run reassign -- "$@"
