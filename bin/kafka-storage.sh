#!/usr/bin/env bash
# kafka-storage.sh for Gregor: runs `gregor storage`:
#   kafka-storage.sh random-uuid
#   kafka-storage.sh format -t CLUSTER_ID -c server.properties [--ignore-formatted] [--standalone]
#                           [--add-scram 'SCRAM-SHA-512=[name=admin,password=...]']...
#                           [--feature transaction.version=N]
#   kafka-storage.sh info -c server.properties
# A Gregor data directory needs no format step (the broker gives a new one a cluster id on first
# start); formatting first fixes the cluster id beforehand, as with Kafka. See docs/cli.md.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib/kafka-tool.sh
. "$(dirname "$(readlink -f "$0")")/lib/kafka-tool.sh"
KAFKA_TOOL_ARGS=("$@")
[ $# -gt 0 ] || kafka_tool_die "expected a command: format, random-uuid or info"
sub="$1"
shift
case "$sub" in
  format)
    for flag in --release-version -r; do
      kafka_tool_unsupported "$flag" "a Gregor data directory has no metadata.version to choose"
    done
    for flag in --initial-controllers -I --no-initial-controllers -N; do
      kafka_tool_unsupported "$flag" "Gregor's controller quorum is controller.quorum.voters in the config"
    done
    kafka_tool_run storage format -- "$@"
    ;;
  random-uuid) kafka_tool_run storage random-uuid -- "$@" ;;
  info) kafka_tool_run storage info -- "$@" ;;
  -h | --help) kafka_tool_run storage -- --help ;;
  *) kafka_tool_die "'$sub' is not supported: Gregor offers format, random-uuid and info" ;;
esac
