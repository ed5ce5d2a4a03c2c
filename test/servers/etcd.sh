#!/usr/bin/env bash
# etcd 3.4 for tests and fault tests (Debian's etcd-server, no systemd), on
# 127.0.0.1: one single-node cluster, and a 3-node cluster for failover tests.
#   single   client FK_ETCD_PORT (2389)              peer FK_ETCD_PEER_PORT (2489)
#   1 .. 3   client FK_ETCD_CLUSTER_BASE+N (2391..3)  peer FK_ETCD_CLUSTER_PEER_BASE+N (2491..3)
# Not etcd's own 2379/2380: a developer's etcd may be there.
#
# usage: etcd.sh COMMAND
#   start | stop | status          every node (start wipes their data)
#   acquire | release              shared use by test runs (see lib.sh)
#   heal                           resume paused nodes, restart stopped ones with their data
#   leader                         print the cluster leader's member index (1..3); exit 1 if none
#   kill N | kill-leader           SIGKILL cluster node N / the leader, wait until it is gone;
#                                  kill-leader prints the index it killed
#   restart N                      SIGKILL node N if it runs, start it again with its data
#                                  dir (it rejoins as the member it was); wait until it serves
#   pause N | resume N             SIGSTOP / SIGCONT cluster node N
#   wait-healthy [SECONDS]         every running cluster node serves and one of them leads
#   pid N | port N                 print node N's PID / client port
#   hold-faults [SECONDS]          wait (600 s) for this server set's fault turn and take it
#                                  for FK_USER_PID; release-faults gives it back (see faults-lib.sh)
# N is 1, 2, 3 or a cluster client port.
# start, acquire and heal print FK_ETCD=http://127.0.0.1:2389,
# FK_ETCD_CLUSTER=http://127.0.0.1:2391,http://127.0.0.1:2392,http://127.0.0.1:2393
# and FK_ETCD_CTL=<this script>.
#
# env: FK_STATE_DIR (/tmp/fencekeeper-test) -> state in $FK_STATE_DIR/etcd/<node>
#      FK_ETCD_PORT FK_ETCD_PEER_PORT FK_ETCD_CLUSTER_BASE (2390) FK_ETCD_CLUSTER_PEER_BASE (2490)
#      FK_ETCD_HEARTBEAT_MS (50) FK_ETCD_ELECTION_MS (500): the cluster's Raft timing
#      FK_ETCD_UNSAFE_NO_FSYNC=1: start every node with --unsafe-no-fsync
#
# Fsync stays on by default. Every put, lease grant and keepalive is fsynced
# before etcd answers it, and that is the latency the lock's step-down
# deadlines and the benchmarks are about; without it etcd answers faster than
# any real deployment and the comparison with other clients and sources means
# nothing. Turn it off only for a throw-away run that measures nothing.
#
# Raft timing for the cluster: heartbeat 50 ms, election timeout 500 ms
# (etcd's defaults are 100 and 1000). Measured here from SIGKILL of the leader
# until a survivor leads: 1.1-2.2 s with the defaults, 0.6-1.6 s with these
# (at load 15), which the failover scenarios pay once per trial. They stayed
# stable on this 2-core machine: no election nobody asked for in 3 idle
# minutes at load 3-6 or 2 minutes at load 15, nor under `etcdctl check perf
# --load=m` (930 fsynced writes/s). The single node has nobody to elect and
# keeps the defaults.
set -euo pipefail
FK_SCRIPT=etcd
. "$(dirname "$0")/nodes-lib.sh"

SINGLE_C=${FK_ETCD_PORT:-2389}
SINGLE_P=${FK_ETCD_PEER_PORT:-2489}
CB=${FK_ETCD_CLUSTER_BASE:-2390}
PB=${FK_ETCD_CLUSTER_PEER_BASE:-2490}
HEARTBEAT=${FK_ETCD_HEARTBEAT_MS:-50}
ELECTION=${FK_ETCD_ELECTION_MS:-500}
# A restarted node replays its WAL since the last snapshot: after the 55,000
# writes of a stress run that took 1 s of a 3 s restart here. A snapshot every
# 10,000 entries (etcd's default: 100,000) bounds that; it costs little.
SNAPSHOT_COUNT=10000
NODES=(single 1 2 3)
IDS=(1 2 3)
D=$FK_STATE_DIR/etcd
FK_CTL_NAME=FK_ETCD_CTL
LOCK=etcd-$SINGLE_C-$CB
TURN=etcd-$CB
WHERE="127.0.0.1:$SINGLE_C and 127.0.0.1:$((CB + 1))-$((CB + 3))"
CLUSTER=cluster
fk_safe_dir "$D"

port() { if [ "$1" = single ]; then echo "$SINGLE_C"; else echo $((CB + $1)); fi; }
pport() { if [ "$1" = single ]; then echo "$SINGLE_P"; else echo $((PB + $1)); fi; }
datadir() { echo "$D/$1/data"; }
pidfile() { echo "$D/$1/etcd.pid"; }
# /proc/PID/cmdline of a node we started holds its data dir
node_marker() { echo "--data-dir $(datadir "$1")"; }

usage() { echo "usage: $0 start|stop|status|acquire|release|heal|leader|kill N|kill-leader|restart N|pause N|resume N|wait-healthy [S]|pid N|port N|hold-faults [S]|release-faults"; }

resolve() { node_named "${1:-}" "${IDS[@]}" || fk_die "unknown cluster node '${1:-}': 1, 2, 3 or ports $(port 1)..$(port 3)"; }

print_env() {
  echo "FK_ETCD=http://127.0.0.1:$SINGLE_C"
  echo "FK_ETCD_CLUSTER=$(node_urls http:// "${IDS[@]}")"
}

# etcdctl (API v3) against endpoints $1. The timeouts: a paused node accepts
# connections in the kernel and never answers.
ctl() {
  local ep=$1; shift
  ETCDCTL_API=3 timeout 5 etcdctl --endpoints="$ep" --dial-timeout=1s --command-timeout=2s "$@" 2>/dev/null
}
# A node that is down answers nothing; ask only nodes that accept connections
# (etcdctl would spend its whole dial timeout retrying a refused connection).
up() { fk_port_open "$(port "$1")"; }
node_serves() { up "$1" && ctl "127.0.0.1:$(port "$1")" endpoint health >/dev/null; }

# "leader term" of node $1 from `endpoint status`: true|false and the Raft term.
# The simple format: endpoint, ID, version, db size, is leader, is learner,
# raft term, raft index, raft applied index, errors.
leader_and_term() { up "$1" && ctl "127.0.0.1:$(port "$1")" endpoint status | awk -F', ' '{print $5, $7}'; }

# The leader's index: the node that says it leads with the highest term (a node
# cut off from the others may still believe in an older term).
leader_id() {
  local i best= best_term=-1 lt
  for i in "${IDS[@]}"; do
    lt=$(leader_and_term "$i") || continue
    set -- $lt
    if [ "${1:-}" = true ] && [ "${2:-0}" -gt "$best_term" ]; then best=$i best_term=$2; fi
  done
  [ -n "$best" ] && echo "$best"
}

launch() {
  local n=$1 c p args
  c=$(port "$n") p=$(pport "$n")
  if node_pid "$n" >/dev/null; then return 0; fi
  fk_port_open "$c" && fk_die "127.0.0.1:$c is in use by a process this script did not start"
  fk_port_open "$p" && fk_die "127.0.0.1:$p is in use by a process this script did not start"
  mkdir -p "$D/$n"
  args=(--name "fk-$n" --data-dir "$(datadir "$n")"
    --listen-client-urls "http://127.0.0.1:$c" --advertise-client-urls "http://127.0.0.1:$c"
    --listen-peer-urls "http://127.0.0.1:$p" --initial-advertise-peer-urls "http://127.0.0.1:$p"
    --initial-cluster-state new --logger zap --log-outputs stderr
    --snapshot-count "$SNAPSHOT_COUNT")
  if [ "$n" = single ]; then
    args+=(--initial-cluster "fk-single=http://127.0.0.1:$p" --initial-cluster-token "fk-etcd-$SINGLE_C")
  else
    local i peers=()
    for i in "${IDS[@]}"; do peers+=("fk-$i=http://127.0.0.1:$(pport "$i")"); done
    # the timing the cluster was started with, so that a restarted node keeps it
    local timing=($HEARTBEAT $ELECTION)
    if [ -s "$D/raft-timing" ]; then read -r -a timing <"$D/raft-timing"; fi
    args+=(--initial-cluster "$(IFS=,; echo "${peers[*]}")" --initial-cluster-token "fk-etcd-cluster-$CB"
      --heartbeat-interval "${timing[0]}" --election-timeout "${timing[1]}")
  fi
  # With a data dir, etcd ignores the --initial-* flags and rejoins as the member it was.
  if [ -n "${FK_ETCD_UNSAFE_NO_FSYNC:-}" ]; then args+=(--unsafe-no-fsync); fi
  # its own session (a Ctrl-C aimed at the test run must not hit it); 9>&-:
  # it must not inherit (and hold for ever) our flock on fd 9
  setsid etcd "${args[@]}" >>"$D/$n/etcd.log" 2>&1 </dev/null 9>&- &
  echo $! >"$(pidfile "$n")"
}

# Node $1 serves (0), or its process has exited (2, no use waiting), or not yet (1).
serves_or_exited() {
  node_serves "$1" && return 0
  node_pid "$1" >/dev/null || return 2
  return 1
}

# Wait until node $1 answers a health check (a committed read); $2 = seconds.
wait_node() {
  local rc=0
  fk_wait_until "${2:-60}" 0.05 serves_or_exited "$1" || rc=$?
  [ "$rc" = 0 ] && return 0
  if [ "$rc" = 2 ]; then fk_log "node $1 exited; last log lines:"; else fk_log "node $1 not healthy after ${2:-60} s; last log lines:"; fi
  tail -5 "$D/$1/etcd.log" >&2
  return 1
}

restart_node() {
  kill_node "$1"
  launch "$1"
  wait_node "$1" 60
}

# The Debian package ships an init script (and a systemd unit) that would run
# etcd as a service on 2379/2380 with /var/lib/etcd. Its postinst enables it,
# and starts it where policy-rc.d allows (containers usually forbid it). While
# it is still enabled as installed (whoever installed the package: this
# script or the test runner), stop it if it came up and disable it, so that
# only this script's nodes run.
package_service_enabled() {
  if [ -d /run/systemd/system ] && command -v systemctl >/dev/null; then
    systemctl is-enabled --quiet etcd.service 2>/dev/null && return 0
  fi
  compgen -G '/etc/rc[2345].d/S[0-9][0-9]etcd' >/dev/null
}

quiet_package_service() {
  local pid
  if [ -d /run/systemd/system ] && command -v systemctl >/dev/null; then
    systemctl disable --now etcd.service >/dev/null 2>&1 || true
  fi
  if pid=$(fk_pid_from /run/etcd.pid /usr/bin/etcd) && ! grep -qF -- "--data-dir $D/" <(tr '\0' ' ' <"/proc/$pid/cmdline"); then
    fk_log "the etcd-server package started its own service (pid $pid); stopping it"
    /etc/init.d/etcd stop >&2 || kill -TERM "$pid"
    fk_wait_gone "$pid" 100 || true
  fi
  if [ -x /etc/init.d/etcd ] && command -v update-rc.d >/dev/null; then update-rc.d etcd disable >/dev/null 2>&1 || true; fi
  fk_log "disabled the etcd-server package's own service"
}

require() {
  fk_ensure_packages "${FK_PKGS_ETCD[@]}"
  if package_service_enabled; then quiet_package_service; fi
}

do_status() {
  local n ok=0 lt
  for n in "${NODES[@]}"; do
    lt=$(leader_and_term "$n" || true)
    [ -n "$lt" ] || ok=1
    echo "node $n client $(port "$n") peer $(pport "$n") pid/state $(node_state "$n") leader,term=${lt:--}"
  done
  return "$ok"
}

do_start() {
  require
  local n t0 t_single; t0=$(fk_now_ms)
  for n in "${NODES[@]}"; do
    fk_port_open "$(port "$n")" && fk_die "127.0.0.1:$(port "$n") is already in use"
    fk_port_open "$(pport "$n")" && fk_die "127.0.0.1:$(pport "$n") is already in use"
  done
  for n in "${NODES[@]}"; do rm -rf "${D:?}/$n"; done
  mkdir -p "$D"
  echo "$HEARTBEAT $ELECTION" >"$D/raft-timing"
  trap 'rc=$?; if [ $rc -ne 0 ]; then fk_log "start failed (rc=$rc); logs in $D/*/etcd.log"; do_stop; fi' EXIT
  for n in "${NODES[@]}"; do launch "$n"; done
  wait_node single 60
  t_single=$(fk_elapsed "$t0")
  wait_healthy 60
  trap - EXIT
  fk_log "single node ready in ${t_single}s, cluster with leader $(leader_id) in $(fk_elapsed "$t0")s"
}

heal() {
  local n
  require
  resume_all
  for n in "${NODES[@]}"; do launch "$n"; done
  wait_node single 60
  wait_healthy 60
}

wait_foreign() {
  wait_node single 60 || fk_die "127.0.0.1:$SINGLE_C answers but is not a healthy etcd"
  wait_healthy 60 || fk_die "127.0.0.1:$(port 1)-$(port 3) answer but are not a healthy etcd cluster"
}

case "${1:-}" in
  leader)  leader_id ;;
  kill-leader) kill_leader ;;
  wait-healthy) wait_healthy "${2:-60}" ;;
  *) fk_nodes_main "$@" ;;
esac
