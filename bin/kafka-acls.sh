#!/usr/bin/env bash
# kafka-acls.sh for Gregor: runs `gregor acls` with Kafka's flags (--bootstrap-server,
# --add / --remove / --list, --allow-principal / --deny-principal, --allow-host / --deny-host,
# --operation, --topic / --group / --cluster / --transactional-id, --resource-pattern-type,
# --producer / --consumer / --idempotent, --principal, --force). The brokers need an authorizer
# (authorizer.class.name); without one the ACL APIs answer SECURITY_DISABLED. See docs/cli.md.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib/kafka-tool.sh
. "$(dirname "$(readlink -f "$0")")/lib/kafka-tool.sh"
KAFKA_TOOL_ARGS=("$@")
kafka_tool_unsupported --authorizer-properties "Gregor has no ZooKeeper: use --bootstrap-server HOST:PORT"
kafka_tool_unsupported --authorizer "Gregor has no ZooKeeper: use --bootstrap-server HOST:PORT"
kafka_tool_unsupported --bootstrap-controller "Gregor's tools talk to brokers: use --bootstrap-server HOST:PORT"
kafka_tool_unsupported --delegation-token "Gregor has no delegation tokens"
kafka_tool_unsupported --user-principal "Gregor has no delegation tokens"
kafka_tool_run acls -- "$@"
