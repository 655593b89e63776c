#!/usr/bin/env bash
# kafka-configs.sh for Gregor: runs `gregor configs` with Kafka's flags (--bootstrap-server, or
# --bootstrap-controller for broker configs,
# --describe / --alter, --entity-type topics|brokers|groups|users|clients --entity-name X / --entity-default,
# --topic / --broker / --broker-defaults / --group, --add-config k=v,... --delete-config k,...,
# --all). See docs/cli.md.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib/kafka-tool.sh
. "$(dirname "$(readlink -f "$0")")/lib/kafka-tool.sh"
KAFKA_TOOL_ARGS=("$@")
kafka_tool_unsupported --zookeeper "Gregor has no ZooKeeper: use --bootstrap-server HOST:PORT"
kafka_tool_unsupported --add-config-file "give the settings with --add-config k=v,k2=v2"
for flag in --user --client --user-defaults --client-defaults; do
  kafka_tool_unsupported "$flag" "name the entity with --entity-type users|clients and --entity-name NAME (or --entity-default)"
done
for flag in --ip --ip-defaults; do
  kafka_tool_unsupported "$flag" "Gregor has no IP connection-rate quotas"
done
kafka_tool_unsupported --broker-logger "Gregor's log levels are set with RUST_LOG when the broker starts"
kafka_tool_unsupported --client-metrics "Gregor has no client metrics subscriptions"
kafka_tool_run configs -- "$@"
