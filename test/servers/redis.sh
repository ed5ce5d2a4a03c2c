#!/usr/bin/env bash
# Redis 7.0 for tests and fault tests (Debian's redis-server, no systemd), all
# on 127.0.0.1, one process per port, never the machine's own 6379:
#   single    BASE      the single-instance lock
#   1 .. 5    BASE+1..5 five independent nodes for Redlock
#   primary   BASE+6    a primary with an asynchronously replicating replica,
#   replica   BASE+7    for the failover that loses what was not yet replicated
# Every node: AOF with appendfsync always (an acknowledged write survives a
# SIGKILL, which Redlock's quorum counter assumes), maxmemory-policy
# noeviction (a lock key is never evicted), no RDB snapshots, and
# `enable-debug-command local` (DEBUG SLEEP, DEBUG JMAP... from 127.0.0.1 only),
# and keyspace notifications for SET, DEL, EXPIRE and expiries (K$gx), which
# `fencekeeper status --watch` over redis:// and redlock:// follows.
#
# usage: redis.sh COMMAND
#   start | stop | status          every node (start wipes their data)
#   acquire | release              shared use by test runs (see lib.sh)
#   heal                           resume paused nodes, restart stopped ones from
#                                  their AOF, re-create the pair unless it is a
#                                  primary with its replica in sync
#   kill N                         SIGKILL node N, wait until it is gone
#   restart N                      SIGKILL node N if it runs, start it again from its AOF
#   restart-empty N                SIGKILL node N if it runs, wipe its data, start it:
#                                  the restart without data that breaks Redlock
#   pause N | resume N             SIGSTOP / SIGCONT node N
#   promote                        REPLICAOF NO ONE on the replica; wait until it is a master
#   pair-reset                     stop and wipe the pair, start it again, wait for the sync
#   pid N | port N                 print node N's PID / port
#   hold-faults [SECONDS]          wait (600 s) for this server set's fault turn and take it
#                                  for FK_USER_PID; release-faults gives it back (see faults-lib.sh)
# N is a node name above (single, 1..5, primary, replica) or its port. `restart
# replica` brings it back as the primary's replica, even after a promote.
# start, acquire and heal print FK_REDIS=redis://127.0.0.1:BASE,
# FK_REDLOCK=redis://127.0.0.1:BASE+1,...,redis://127.0.0.1:BASE+5,
# FK_REDIS_PAIR=redis://primary,redis://replica and FK_REDIS_CTL=<this script>.
#
# env: FK_STATE_DIR (/tmp/fencekeeper-test) -> state in $FK_STATE_DIR/redis/<node>
#      FK_REDIS_BASE (6390: ports 6390..6397)
set -euo pipefail
FK_SCRIPT=redis
. "$(dirname "$0")/nodes-lib.sh"

BASE=${FK_REDIS_BASE:-6390}
NODES=(single 1 2 3 4 5 primary replica)
REDLOCK=(1 2 3 4 5)
D=$FK_STATE_DIR/redis
FK_CTL_NAME=FK_REDIS_CTL
LOCK=redis-$BASE
TURN=redis-$BASE
WHERE=127.0.0.1:$BASE-$((BASE + 7))
fk_safe_dir "$D"

port() {
  case "$1" in
    single) echo "$BASE" ;;
    [1-5]) echo $((BASE + $1)) ;;
    primary) echo $((BASE + 6)) ;;
    replica) echo $((BASE + 7)) ;;
  esac
}
conf() { echo "$D/$1/redis.conf"; }
pidfile() { echo "$D/$1/redis.pid"; }
node_marker() { conf "$1"; }

usage() { echo "usage: $0 start|stop|status|acquire|release|heal|kill N|restart N|restart-empty N|pause N|resume N|promote|pair-reset|pid N|port N|hold-faults [S]|release-faults"; }

# A node name, from a name or a port.
resolve() { node_named "${1:-}" "${NODES[@]}" || fk_die "unknown node '${1:-}': one of ${NODES[*]} or ports $BASE..$((BASE + 7))"; }

print_env() {
  echo "FK_REDIS=redis://127.0.0.1:$BASE"
  echo "FK_REDLOCK=$(node_urls redis:// "${REDLOCK[@]}")"
  echo "FK_REDIS_PAIR=$(node_urls redis:// primary replica)"
}

# One command to the node on port $1. `timeout`: a paused (SIGSTOPped) node
# accepts the connection in the kernel and never answers.
cli() { local p=$1; shift; timeout 2 redis-cli -h 127.0.0.1 -p "$p" "$@" 2>/dev/null; }
answers() { [ "$(cli "$1" ping)" = PONG ]; }

# Wait until port $1 answers PONG (LOADING while it replays its AOF); $2 = seconds.
wait_pong() { fk_wait_until "${2:-30}" 0.02 answers "$1"; }

write_conf() {
  local n=$1
  mkdir -p "$D/$n/data"
  cat >"$(conf "$n")" <<CONF
port $(port "$n")
bind 127.0.0.1
daemonize yes
pidfile $(pidfile "$n")
logfile $D/$n/redis.log
dir $D/$n/data
# the config path in the process title: /proc/PID/cmdline then tells our
# process from any other redis-server (Redis rewrites its argv)
proc-title-template "{title} {listen-addr} {server-mode} {config-file}"
save ""
appendonly yes
appendfsync always
maxmemory-policy noeviction
enable-debug-command local
notify-keyspace-events K\$gx
# a replica's first sync starts at once (the default waits 5 s for more replicas)
repl-diskless-sync-delay 0
CONF
  if [ "$n" = replica ]; then echo "replicaof 127.0.0.1 $(port primary)" >>"$(conf "$n")"; fi
}

# Start node $1 from whatever data it has and wait until it answers; no-op if it runs.
launch() {
  local n=$1 p
  p=$(port "$n")
  if node_pid "$n" >/dev/null; then return 0; fi
  if fk_port_open "$p"; then fk_die "127.0.0.1:$p is in use by a process this script did not start"; fi
  write_conf "$n"
  rm -f "$(pidfile "$n")"
  # 9>&-: the daemon must not inherit (and hold for ever) our flock on fd 9
  redis-server "$(conf "$n")" </dev/null >/dev/null 2>>"$D/$n/redis.log" 9>&- ||
    fk_die "redis-server for node $n failed to start; see $D/$n/redis.log"
  if ! wait_pong "$p" 60; then
    fk_log "node $n does not answer on 127.0.0.1:$p; last log lines:"
    tail -10 "$D/$n/redis.log" >&2
    exit 1
  fi
}

wipe() { rm -rf "$D/$1/data"; mkdir -p "$D/$1/data"; }

# $1 = node; $2 = empty to start it without its data
restart_node() {
  kill_node "$1"
  if [ "${2:-}" = empty ]; then wipe "$1"; fi
  launch "$1"
}

# role:master or role:slave from INFO replication, '' if no answer.
role() { cli "$(port "$1")" info replication | tr -d '\r' | sed -n 's/^role://p'; }
link_up() { cli "$(port replica)" info replication | tr -d '\r' | grep -qx 'master_link_status:up'; }

pair_ok() {
  [ "$(role primary)" = master ] && [ "$(role replica)" = slave ] && link_up
}

wait_link() {
  fk_wait_until "${1:-30}" 0.02 link_up && return 0
  fk_log "the replica did not sync with the primary in ${1:-30} s"
  return 1
}

pair_reset() {
  kill_node replica
  kill_node primary
  wipe primary
  wipe replica
  launch primary
  launch replica
  wait_link 30
}

single_or_redlock() { [ "$1" != primary ] && [ "$1" != replica ]; }

heal() {
  local n
  fk_ensure_packages "${FK_PKGS_REDIS[@]}"
  resume_all
  for n in "${NODES[@]}"; do
    if single_or_redlock "$n"; then launch "$n"; fi
  done
  pair_ok || { fk_log "re-creating the primary/replica pair"; pair_reset; }
}

do_status() {
  local n ok=0
  for n in "${NODES[@]}"; do
    answers "$(port "$n")" || ok=1
    echo "node $n port $(port "$n") pid/state $(node_state "$n") role=$(role "$n")"
  done
  return "$ok"
}

do_start() {
  fk_ensure_packages "${FK_PKGS_REDIS[@]}"
  local n t0; t0=$(fk_now_ms)
  for n in "${NODES[@]}"; do
    fk_port_open "$(port "$n")" && fk_die "127.0.0.1:$(port "$n") is already in use"
  done
  for n in "${NODES[@]}"; do rm -rf "${D:?}/$n"; done
  # on any failure below: stop what already started, keep the logs
  trap 'rc=$?; if [ $rc -ne 0 ]; then fk_log "start failed (rc=$rc); logs in $D/*/redis.log"; do_stop; fi' EXIT
  for n in "${NODES[@]}"; do launch "$n"; done
  wait_link 30
  trap - EXIT
  fk_log "${#NODES[@]} nodes on $WHERE in $(fk_elapsed "$t0")s"
}

wait_foreign() {
  local n
  for n in "${NODES[@]}"; do
    wait_pong "$(port "$n")" 30 || fk_die "127.0.0.1:$(port "$n") does not answer PING, and this script did not start it"
  done
}

case "${1:-}" in
  restart-empty)
    node_arg "${2:-}"
    fk_locked "$LOCK" restart_node "$N" empty
    fk_log "node $N serving again on 127.0.0.1:$(port "$N") without its data (pid $(node_pid "$N"))" ;;
  promote)
    [ "$(cli "$(port replica)" replicaof no one)" = OK ] || fk_die "the replica did not accept REPLICAOF NO ONE"
    for _ in $(seq 1 100); do [ "$(role replica)" = master ] && break; sleep 0.02; done
    [ "$(role replica)" = master ] || fk_die "the replica is not a master after REPLICAOF NO ONE"
    fk_log "promoted the replica on 127.0.0.1:$(port replica)" ;;
  pair-reset) fk_locked "$LOCK" pair_reset ;;
  *) fk_nodes_main "$@" ;;
esac
