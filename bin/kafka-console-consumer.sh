#!/usr/bin/env bash
# kafka-console-consumer.sh for Gregor: runs `gregor consume` with Kafka's flags
# (--bootstrap-server, --topic, --group, --from-beginning, --max-messages, --timeout-ms,
# --isolation-level, --property print.key=true ...). See docs/cli.md.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib/kafka-tool.sh
. "$(dirname "$(readlink -f "$0")")/lib/kafka-tool.sh"
KAFKA_TOOL_ARGS=("$@")
kafka_tool_unsupported --partition "gregor consume reads as a group member: use --group (and --from-beginning)"
kafka_tool_unsupported --offset "gregor consume reads as a group member: use --group (and --from-beginning)"
# Kafka's --consumer.config file goes on as the client properties file (--command-config).
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --consumer.config)
      [ $# -gt 1 ] || kafka_tool_die "--consumer.config needs a file"
      args+=(--command-config "$2")
      shift 2
      ;;
    --consumer.config=*)
      args+=(--command-config "${1#*=}")
      shift
      ;;
    *)
      args+=("$1")
      shift
      ;;
  esac
done
kafka_tool_run consume -- "${args[@]+"${args[@]}"}"
