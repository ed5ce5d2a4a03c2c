#!/usr/bin/env bash
# A DynamoDB-API server for tests: dynalite 4 (npm, a dev dependency), in
# memory, on 127.0.0.1. DynamoDB Local would need a download these machines
# cannot make; dynalite evaluates condition expressions as DynamoDB does, but
# ignores ReturnValuesOnConditionCheckFailure and has no TransactWriteItems
# (the guide says which paths fencekeeper/dynamodb was tested on).
#
# usage: dynalite.sh start|stop|status|acquire|release   (see lib.sh for acquire/release)
#   start    start it (empty: the store is in memory) or fail if the port is taken
#   stop     stop the server this script started (by PID file)
#   status   exit 0 when it answers ListTables
# start and acquire print FK_DYNAMODB=http://127.0.0.1:PORT on stdout.
#
# env: FK_STATE_DIR (/tmp/fencekeeper-test) -> state in $FK_STATE_DIR/dynalite
#      FK_DYNAMODB_PORT (8011)
set -euo pipefail
FK_SCRIPT=dynalite
. "$(dirname "$0")/lib.sh"

PORT=${FK_DYNAMODB_PORT:-8011}
D=$FK_STATE_DIR/dynalite
PIDFILE=$D/dynalite.pid
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
CLI=$ROOT/node_modules/dynalite/cli.js
# The PID file's process must show this in its command line (lib.sh: fk_is_ours).
MARKER="dynalite/cli.js --host 127.0.0.1 --port $PORT"
fk_safe_dir "$D"

print_env() { echo "FK_DYNAMODB=http://127.0.0.1:$PORT"; }

# A DynamoDB answer to ListTables (dynalite checks only that a signature is there).
answering() {
  curl -s -m 2 -X POST "http://127.0.0.1:$PORT/" \
    -H 'Content-Type: application/x-amz-json-1.0' -H 'X-Amz-Target: DynamoDB_20120810.ListTables' \
    -H 'X-Amz-Date: 20200101T000000Z' -H 'Authorization: AWS4-HMAC-SHA256 Credential=test/20200101/us-east-1/dynamodb/aws4_request, SignedHeaders=host, Signature=x' \
    -d '{}' 2>/dev/null | grep -q '"TableNames"'
}
# While our server starts: 2 once it has died (fk_wait_until stops waiting).
started() {
  fk_alive "$(cat "$PIDFILE")" || return 2
  answering
}

do_start() {
  [ -f "$CLI" ] || fk_die "no $CLI: run npm ci (dynalite is a dev dependency)"
  if fk_port_open "$PORT"; then fk_die "127.0.0.1:$PORT is already in use"; fi
  local t0; t0=$(fk_now_ms)
  mkdir -p "$D"
  # In memory (no --path); tables become ACTIVE at once. 9>&-: the server
  # must not inherit (and hold for ever) our flock on fd 9.
  (cd "$ROOT" && exec setsid node node_modules/dynalite/cli.js --host 127.0.0.1 --port "$PORT" \
    --createTableMs 0 --deleteTableMs 0 --updateTableMs 0 </dev/null >"$D/dynalite.out" 2>&1 9>&-) &
  echo $! >"$PIDFILE"
  if ! fk_wait_until 30 0.2 started; then
    fk_log "not answering after 30 s; last log lines:"; tail -20 "$D/dynalite.out" >&2
    fk_stop_pidfile "$PIDFILE" "$MARKER" KILL
    exit 1
  fi
  fk_log "serving on 127.0.0.1:$PORT (pid $(cat "$PIDFILE")) in $(fk_elapsed "$t0")s"
}

do_stop() { fk_stop_pidfile "$PIDFILE" "$MARKER"; }

# What answers on the port may still be starting: it gets 30 s.
serving() { fk_wait_until 30 0.2 answering; }
do_acquire() { fk_acquire_port "$PORT" serving "127.0.0.1:$PORT is taken by something that does not answer DynamoDB's ListTables"; }

usage() { echo "usage: $0 start|stop|status|acquire|release"; }

case "${1:-}" in
  status) if answering; then echo "dynalite answers on 127.0.0.1:$PORT"; else exit 1; fi ;;
  *) fk_main "dynalite-$PORT" "$@" ;;
esac
