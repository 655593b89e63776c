#!/usr/bin/env bash
# kafka-transactions.sh for Gregor: runs `gregor transactions` with Kafka's flags
# (--bootstrap-server, --command-config) and verbs: list, describe --transactional-id,
# describe-producers --topic --partition, abort --topic --partition (--start-offset |
# --producer-id --producer-epoch --coordinator-epoch), find-hanging (--broker-id | --topic
# [--partition]) [--max-transaction-timeout MINUTES]. See docs/cli.md.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib/kafka-tool.sh
. "$(dirname "$(readlink -f "$0")")/lib/kafka-tool.sh"
KAFKA_TOOL_ARGS=("$@")
kafka_tool_unsupported --bootstrap-controller "Gregor's tools talk to brokers: use --bootstrap-server HOST:PORT"
kafka_tool_run transactions -- "$@"
