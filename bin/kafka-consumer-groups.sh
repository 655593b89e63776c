#!/usr/bin/env bash
# kafka-consumer-groups.sh for Gregor: runs `gregor groups` with Kafka's flags
# (--bootstrap-server, --list [--state] [--type], --describe --group G [--members [--verbose] |
# --offsets | --state [--verbose]], --all-groups, --reset-offsets --group G --topic T[:P,...] | --all-topics
# --to-earliest | --to-latest | --to-current | --to-offset N | --shift-by N | --to-datetime D |
# --by-duration D | --from-file CSV [--export] --dry-run | --execute, --delete --group G,
# --delete-offsets --group G --topic T[:P,...]). See docs/cli.md.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib/kafka-tool.sh
. "$(dirname "$(readlink -f "$0")")/lib/kafka-tool.sh"
KAFKA_TOOL_ARGS=("$@")
kafka_tool_unsupported --zookeeper "Gregor has no ZooKeeper: use --bootstrap-server HOST:PORT"
kafka_tool_run groups -- "$@"
