#!/usr/bin/env bash
# kafka-topics.sh for Gregor: runs `gregor topics` with Kafka's flags (--bootstrap-server,
# --create --topic --partitions --replication-factor --config k=v, --list, --describe, --alter,
# --delete, ...). See docs/cli.md.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib/kafka-tool.sh
. "$(dirname "$(readlink -f "$0")")/lib/kafka-tool.sh"
KAFKA_TOOL_ARGS=("$@")
kafka_tool_unsupported --zookeeper "Gregor has no ZooKeeper: use --bootstrap-server HOST:PORT (librdkafka's test suite does so when TEST_KAFKA_VERSION is 3.0 or later, with BROKERS set)"
kafka_tool_unsupported --bootstrap-controller "Gregor's tools talk to brokers: use --bootstrap-server HOST:PORT"
kafka_tool_run topics -- "$@"
