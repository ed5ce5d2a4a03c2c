#!/usr/bin/env bash
# A standalone ZooKeeper 3.8 on 127.0.0.1 for tests (Debian package, no systemd).
#
# usage: zk-standalone.sh start|stop|status|acquire|release
#   start    start it (wiping its data) or fail if the port is taken
#   stop     stop the server this script started (by PID file)
#   status   srvr output; exit 1 when not serving
#   acquire  for test runs: reuse whatever serves on the port, else start it;
#            register the caller (FK_USER_PID) as a user
#   release  unregister; stop it if acquire started it and no user is left
# start and acquire print FK_ZK_STANDALONE=127.0.0.1:PORT on stdout, and, when
# the secure port answers TLS with a certificate of this state dir's CA,
# FK_ZK_STANDALONE_TLS=127.0.0.1:SECURE_PORT and FK_ZK_TLS_CA=<ca.pem>
# (zk-certs.sh makes the CA on first start).
#
# env: FK_STATE_DIR (/tmp/fencekeeper-test) -> state in $FK_STATE_DIR/zk-standalone
#      FK_ZK_PORT (2181) FK_ZK_SECURE_PORT (2182) FK_ZK_TICK (500 ms)
#      FK_ZK_HEAP (256m) FK_ZK_JVM_FLAGS
set -euo pipefail
FK_SCRIPT=zk-standalone
. "$(dirname "$0")/zk-lib.sh"

PORT=${FK_ZK_PORT:-2181}
SPORT=${FK_ZK_SECURE_PORT:-2182}
TICK=${FK_ZK_TICK:-500}
D=$FK_STATE_DIR/zk-standalone
CFG=$D/zoo.cfg
PIDFILE=$D/zk.pid
fk_safe_dir "$D"

print_env() {
  echo "FK_ZK_STANDALONE=127.0.0.1:$PORT"
  if fk_zk_certs && fk_zk_tls_up "$SPORT"; then
    echo "FK_ZK_STANDALONE_TLS=127.0.0.1:$SPORT"
    echo "FK_ZK_TLS_CA=$FK_ZK_TLS_DIR/ca.pem"
  else
    fk_log "no TLS with this state dir's CA on 127.0.0.1:$SPORT (a server started without the secure port?): FK_ZK_STANDALONE_TLS not set"
  fi
}

do_start() {
  fk_zk_require
  if fk_port_open "$PORT"; then fk_die "127.0.0.1:$PORT is already in use"; fi
  if fk_port_open "$SPORT"; then fk_die "127.0.0.1:$SPORT (the secure port) is already in use"; fi
  local t0; t0=$(fk_now_ms)
  fk_zk_certs
  rm -rf "$D/data"
  mkdir -p "$D/data"
  { fk_zk_common_cfg "$D/data" "$PORT" "$TICK"; fk_zk_tls_cfg "$SPORT"; } >"$CFG"
  fk_zk_launch "$CFG" "$D/zk.out" "$PIDFILE"
  if ! fk_zk_wait_serving "$PORT" 60 || ! fk_zk_wait_tls "$SPORT" 30; then
    fk_log "not serving after 60 s; last log lines:"; tail -20 "$D/zk.out" >&2
    fk_stop_pidfile "$PIDFILE" "$CFG" KILL
    exit 1
  fi
  fk_log "serving on 127.0.0.1:$PORT (pid $(cat "$PIDFILE")) in $(fk_elapsed "$t0")s"
}

do_stop() { fk_stop_pidfile "$PIDFILE" "$CFG"; }

# What answers on the port may still be starting (another run, or a
# developer's server): it gets 60 s to serve.
serving() { fk_zk_wait_serving "$PORT" 60; }
do_acquire() { fk_acquire_port "$PORT" serving "127.0.0.1:$PORT is taken by something that is not serving ZooKeeper"; }

usage() { echo "usage: $0 start|stop|status|acquire|release"; }

case "${1:-}" in
  status)  out=$(fk_zk_4lw "$PORT" srvr); echo "$out"; grep -q '^Mode: ' <<<"$out" ;;
  *) fk_main "zk-$PORT" "$@" ;;
esac
