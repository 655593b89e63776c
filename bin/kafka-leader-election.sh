#!/usr/bin/env bash
# kafka-leader-election.sh for Gregor: runs `gregor elect` with Kafka's flags
# (--bootstrap-server, --election-type PREFERRED|UNCLEAN, --all-topic-partitions |
# --topic T --partition P | --path-to-json-file F). See docs/cli.md.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib/kafka-tool.sh
. "$(dirname "$(readlink -f "$0")")/lib/kafka-tool.sh"
KAFKA_TOOL_ARGS=("$@")
kafka_tool_unsupported --bootstrap-controller "Gregor's tools talk to brokers: use --bootstrap-server HOST:PORT"
kafka_tool_run elect -- "$@"
