# shellcheck shell=bash
# Shared by the Kafka-named scripts in bin/ (sourced, not run): finds the `gregor` binary and
# runs one of its commands with Kafka's flags, refusing the flags Gregor does not support with
# a message that says why.
#
# The binary: see bin/lib/gregor-binary.sh.

KAFKA_TOOL_NAME="$(basename "$0")"
KAFKA_TOOL_ROOT="$(cd "$(dirname "$(readlink -f "$0")")/.." && pwd)"

kafka_tool_die() {
  echo "$KAFKA_TOOL_NAME: $*" >&2
  exit 1
}

# shellcheck source=bin/lib/gregor-binary.sh
. "$KAFKA_TOOL_ROOT/bin/lib/gregor-binary.sh"

kafka_tool_gregor() {
  gregor_binary "$KAFKA_TOOL_ROOT" || kafka_tool_die "no gregor binary to run"
}

# kafka_tool_unsupported FLAG REASON: fails if FLAG (or FLAG=value) is among the arguments
# in KAFKA_TOOL_ARGS.
kafka_tool_unsupported() {
  local flag="$1" reason="$2" a
  for a in "${KAFKA_TOOL_ARGS[@]+"${KAFKA_TOOL_ARGS[@]}"}"; do
    if [ "$a" = "$flag" ] || [ "${a%%=*}" = "$flag" ]; then
      kafka_tool_die "$flag is not supported: $reason"
    fi
  done
}

# Kafka's client properties file (--command-config, --admin.config) goes to gregor as
# --command-config: gregor reads its security settings (security.protocol, ssl.*, sasl.*,
# client.id; docs/security.md) and refuses any other setting by name. Checked here only for
# being readable, so that the message names the script's own flag.
kafka_tool_client_config() {
  local flag="$1" file="$2"
  [ -n "$file" ] || kafka_tool_die "$flag needs a file"
  if [ ! -f "$file" ] || [ ! -r "$file" ]; then
    kafka_tool_die "$flag $file: cannot read the file"
  fi
  [ -z "${KAFKA_TOOL_CLIENT_CONFIG:-}" ] \
    || kafka_tool_die "$flag $file: only one client properties file may be given"
  KAFKA_TOOL_CLIENT_CONFIG="$file"
}

# kafka_tool_run COMMAND... -- ARGS...: runs `gregor COMMAND... ARGS...`, with a
# --command-config / --admin.config file passed on as --command-config; a usage error (clap's
# exit status 2) gets a line saying which gregor command the script runs.
kafka_tool_run() {
  local cmd=() args=() gregor status a
  KAFKA_TOOL_CLIENT_CONFIG=""
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do
    cmd+=("$1")
    shift
  done
  [ $# -gt 0 ] && shift
  while [ $# -gt 0 ]; do
    a="$1"
    shift
    case "$a" in
      --command-config | --admin.config)
        [ $# -gt 0 ] || kafka_tool_die "$a needs a file"
        kafka_tool_client_config "$a" "$1"
        shift
        ;;
      --command-config=* | --admin.config=*)
        kafka_tool_client_config "${a%%=*}" "${a#*=}"
        ;;
      *) args+=("$a") ;;
    esac
  done
  [ -z "$KAFKA_TOOL_CLIENT_CONFIG" ] || args+=(--command-config "$KAFKA_TOOL_CLIENT_CONFIG")
  gregor="$(kafka_tool_gregor)"
  status=0
  "$gregor" "${cmd[@]}" "${args[@]+"${args[@]}"}" || status=$?
  if [ "$status" -eq 2 ]; then
    echo "$KAFKA_TOOL_NAME: runs \`gregor ${cmd[*]}\` (see \`gregor ${cmd[*]} --help\` for the" \
      "options it takes)" >&2
  fi
  return "$status"
}
