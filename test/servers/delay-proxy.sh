#!/usr/bin/env bash
# The latency benches' delay proxy (delay-proxy.c beside this script): built
# with the machine's gcc into the state dir, one process per NAME, each on
# its own 127.0.0.1 ports, found again by its PID file and its command line.
#
# usage: delay-proxy.sh COMMAND
#   build                                  compile (again when the source is newer)
#   start NAME DELAY_US LPORT=TPORT...     start proxy NAME adding DELAY_US one way, every
#                                          segment, both directions, LPORT -> 127.0.0.1:TPORT
#   stop NAME                              stop it (SIGTERM, by its PID)
#   stats NAME                             its totals now (bytes, flights, CPU; see delay-proxy.c)
# start prints FK_DELAY_PROXY_PID=<pid> and FK_DELAY_PROXY_STATS=<file>.
#
# env: FK_STATE_DIR (/tmp/fencekeeper-test) -> $FK_STATE_DIR/delay-proxy/
set -euo pipefail
FK_SCRIPT=delay-proxy
. "$(dirname "$0")/lib.sh"

D=$FK_STATE_DIR/delay-proxy
SRC=$(cd "$(dirname "$0")" && pwd)/delay-proxy.c
BIN=$D/delay-proxy
fk_safe_dir "$D"

usage() { echo "usage: $0 build | start NAME DELAY_US LPORT=TPORT... | stop NAME | stats NAME"; }

do_build() {
  mkdir -p "$D"
  if [ -x "$BIN" ] && [ "$BIN" -nt "$SRC" ]; then return 0; fi
  command -v gcc >/dev/null || fk_ensure_packages gcc libc6-dev
  gcc -O2 -Wall -Wextra -Werror -o "$BIN.new" "$SRC"
  mv "$BIN.new" "$BIN"
  fk_log "built $BIN"
}

check_name() {
  case "$1" in ""|*[!A-Za-z0-9_-]*) fk_die "proxy name '$1': letters, digits, - and _ only";; esac
}

# The stats file path is in the command line: it tells our process NAME from any other.
stats_file() { echo "$D/$1.stats"; }
pid_file() { echo "$D/$1.pid"; }

do_start() {
  local name=$1 delay=$2; shift 2
  check_name "$name"
  [ $# -gt 0 ] || fk_die "start: at least one LPORT=TPORT mapping"
  if fk_pid_from "$(pid_file "$name")" "$(stats_file "$name")" >/dev/null; then fk_die "proxy $name is already running"; fi
  local m
  for m in "$@"; do
    fk_port_open "${m%%=*}" && fk_die "127.0.0.1:${m%%=*} is already in use"
  done
  rm -f "$(stats_file "$name")"
  # 9>&-: the daemon must not inherit our flock on fd 9
  "$BIN" "$delay" "$(stats_file "$name")" "$@" </dev/null >>"$D/$name.log" 2>&1 9>&- &
  local pid=$!
  echo "$pid" >"$(pid_file "$name")"
  # It writes its stats file once every port is bound.
  if ! fk_wait_until 10 0.02 test -s "$(stats_file "$name")"; then
    tail -5 "$D/$name.log" >&2
    fk_die "proxy $name did not start"
  fi
  fk_alive "$pid" || { tail -5 "$D/$name.log" >&2; fk_die "proxy $name exited at start"; }
  fk_log "proxy $name (pid $pid): +${delay} us one way on $*"
  echo "FK_DELAY_PROXY_PID=$pid"
  echo "FK_DELAY_PROXY_STATS=$(stats_file "$name")"
}

do_stop() {
  check_name "$1"
  fk_stop_pidfile "$(pid_file "$1")" "$(stats_file "$1")"
  rm -f "$(stats_file "$1")" "$(stats_file "$1").tmp"
}

do_stats() {
  check_name "$1"
  local pid f
  f=$(stats_file "$1")
  pid=$(fk_pid_from "$(pid_file "$1")" "$f") || fk_die "proxy $1 is not running"
  rm -f "$f"
  kill -USR1 "$pid"
  fk_wait_until 5 0.01 test -s "$f" || fk_die "proxy $1 wrote no stats"
  cat "$f"
}

case "${1:-}" in
  build) fk_locked delay-proxy-build do_build ;;
  start) shift; [ $# -ge 3 ] || { usage >&2; exit 2; }; fk_locked delay-proxy-build do_build; do_start "$@" ;;
  stop) [ $# -eq 2 ] || { usage >&2; exit 2; }; do_stop "$2" ;;
  stats) [ $# -eq 2 ] || { usage >&2; exit 2; }; do_stats "$2" ;;
  *) usage >&2; exit 2 ;;
esac
