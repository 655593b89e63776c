#!/usr/bin/env bash
# kafka-acls.sh for Gregor: Gregor has no ACLs (no authorizer and no CreateAcls /
# DescribeAcls / DeleteAcls APIs), so this script only says so and fails, rather than leaving a
# runbook (or librdkafka's tests 0109, 0115 and 0119) with "command not found".
set -euo pipefail
echo "$(basename "$0"): ACLs are not supported: Gregor has no authorizer (every client may do everything)" >&2
exit 1
