#!/usr/bin/env bash
# A 3-node ZooKeeper 3.8 ensemble on 127.0.0.1 for tests and fault tests.
#
# usage: zk-ensemble.sh COMMAND
#   start | stop | status          whole ensemble (start wipes its data)
#   acquire | release              shared use by test runs (see lib.sh)
#   leader                         print the leader's id (1..3); exit 1 if none
#   kill-leader                    SIGKILL the leader, wait until it is gone, print its id
#   start-node N | stop-node N     (re)start node N keeping its data / SIGTERM node N
#   kill-node N                    SIGKILL node N
#   wait-healthy [SECONDS]         every running node serves and one of them leads
# start and acquire print FK_ZK_ENSEMBLE=... and FK_ZK_ENSEMBLE_CTL=<this script>,
# and, when every node's secure port answers TLS with a certificate of this
# state dir's CA, FK_ZK_ENSEMBLE_TLS=... (the secure ports) and FK_ZK_TLS_CA.
#
# env: FK_STATE_DIR (/tmp/fencekeeper-test) -> state in $FK_STATE_DIR/zk-ensemble/nN
#      FK_ZK_ENS_CLIENT_BASE (2280: client ports 2281..2283)
#      FK_ZK_ENS_SECURE_BASE (2290: secure client ports 2291..2293)
#      FK_ZK_ENS_PEER_BASE (2880: 2881..2883) FK_ZK_ENS_ELECTION_BASE (3880: 3881..3883)
#      FK_ZK_ENS_TICK (500 ms) FK_ZK_HEAP (256m) FK_ZK_JVM_FLAGS
#
# tickTime 500 ms with syncLimit 4: a follower cut off without TCP resets is
# dropped after 2 s instead of the 10 s of the defaults (syncLimit x tickTime),
# so partition tests stay fast.
set -euo pipefail
FK_SCRIPT=zk-ensemble
. "$(dirname "$0")/zk-lib.sh"

CB=${FK_ZK_ENS_CLIENT_BASE:-2280}
SB=${FK_ZK_ENS_SECURE_BASE:-2290}
PB=${FK_ZK_ENS_PEER_BASE:-2880}
EB=${FK_ZK_ENS_ELECTION_BASE:-3880}
TICK=${FK_ZK_ENS_TICK:-500}
IDS=(1 2 3)
D=$FK_STATE_DIR/zk-ensemble
SELF=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
fk_safe_dir "$D"

port() { echo $((CB + $1)); }
sport() { echo $((SB + $1)); }
cfg() { echo "$D/n$1/zoo.cfg"; }
pidfile() { echo "$D/n$1/zk.pid"; }
check_id() { case "${1:-}" in 1|2|3) ;; *) fk_die "node id must be 1, 2 or 3, got '${1:-}'";; esac; }

print_env() {
  local i hosts=()
  for i in "${IDS[@]}"; do hosts+=("127.0.0.1:$(port "$i")"); done
  (IFS=,; echo "FK_ZK_ENSEMBLE=${hosts[*]}")
  echo "FK_ZK_ENSEMBLE_CTL=$SELF"
  hosts=()
  fk_zk_certs || return 0
  for i in "${IDS[@]}"; do
    if ! fk_zk_tls_up "$(sport "$i")"; then
      fk_log "no TLS with this state dir's CA on 127.0.0.1:$(sport "$i") (an ensemble started without secure ports?): FK_ZK_ENSEMBLE_TLS not set"
      return 0
    fi
    hosts+=("127.0.0.1:$(sport "$i")")
  done
  (IFS=,; echo "FK_ZK_ENSEMBLE_TLS=${hosts[*]}")
  echo "FK_ZK_TLS_CA=$FK_ZK_TLS_DIR/ca.pem"
}

write_cfg() {
  local i=$1 j
  mkdir -p "$D/n$i/data"
  echo "$i" >"$D/n$i/data/myid"
  {
    fk_zk_common_cfg "$D/n$i/data" "$(port "$i")" "$TICK"
    fk_zk_tls_cfg "$(sport "$i")"
    echo "initLimit=20"
    echo "syncLimit=4"
    for j in "${IDS[@]}"; do echo "server.$j=127.0.0.1:$((PB + j)):$((EB + j))"; done
  } >"$(cfg "$i")"
}

node_pid() { fk_pid_from "$(pidfile "$1")" "$(cfg "$1")"; }

launch_node() {
  local i=$1
  if node_pid "$i" >/dev/null; then return 0; fi
  if fk_port_open "$(port "$i")"; then fk_die "127.0.0.1:$(port "$i") is in use by a process this script did not start"; fi
  if fk_port_open "$(sport "$i")"; then fk_die "127.0.0.1:$(sport "$i") (node $i's secure port) is in use by a process this script did not start"; fi
  fk_zk_certs
  write_cfg "$i"
  fk_zk_launch "$(cfg "$i")" "$D/n$i/zk.out" "$(pidfile "$i")"
}

leader_id() {
  local i
  for i in "${IDS[@]}"; do
    [ "$(fk_zk_mode "$(port "$i")")" = leader ] && { echo "$i"; return 0; }
  done
  return 1
}

# Every node whose process runs (or, for a server we didn't start, every
# node that accepts connections) reports a Mode, and one node is the leader.
healthy() {
  local i any=0
  for i in "${IDS[@]}"; do
    if node_pid "$i" >/dev/null || { [ ! -s "$(pidfile "$i")" ] && fk_port_open "$(port "$i")"; }; then
      any=1
      [ -n "$(fk_zk_mode "$(port "$i")")" ] || return 1
    fi
  done
  [ "$any" = 1 ] && leader_id >/dev/null
}

wait_healthy() {
  local deadline=$(( $(fk_now_ms) + ${1:-60} * 1000 ))
  while [ "$(fk_now_ms)" -lt "$deadline" ]; do
    healthy && return 0
    sleep 0.05
  done
  fk_log "ensemble not healthy after ${1:-60} s:"
  do_status >&2
  return 1
}

do_status() {
  local i pid
  for i in "${IDS[@]}"; do
    pid=$(node_pid "$i" || echo -)
    echo "node $i port $(port "$i") secure $(sport "$i") pid $pid mode=$(fk_zk_mode "$(port "$i")")"
  done
}

do_start() {
  fk_zk_require
  local i t0; t0=$(fk_now_ms)
  for i in "${IDS[@]}"; do
    fk_port_open "$(port "$i")" && fk_die "127.0.0.1:$(port "$i") is already in use"
  done
  for i in "${IDS[@]}"; do rm -rf "$D/n$i"; done
  for i in "${IDS[@]}"; do launch_node "$i"; done
  if ! wait_healthy 90 || ! { fk_zk_wait_tls "$(sport 1)" 30 && fk_zk_wait_tls "$(sport 2)" 30 && fk_zk_wait_tls "$(sport 3)" 30; }; then
    for i in "${IDS[@]}"; do fk_log "--- node $i log tail"; tail -5 "$D/n$i/zk.out" >&2 || true; done
    do_stop
    exit 1
  fi
  fk_log "quorum with leader $(leader_id) in $(fk_elapsed "$t0")s"
}

do_stop() {
  local i
  for i in "${IDS[@]}"; do fk_stop_pidfile "$(pidfile "$i")" "$(cfg "$i")"; done
}

do_acquire() {
  mkdir -p "$D"
  fk_live_users "$D" >/dev/null
  local i answering=0
  for i in "${IDS[@]}"; do fk_port_open "$(port "$i")" && answering=1; done
  if [ "$answering" = 0 ]; then
    do_start
    : >"$D/acquired"
  else
    if [ -e "$D/acquired" ]; then
      # ours from an earlier run: a fault test may have left a node down
      fk_zk_require
      for i in "${IDS[@]}"; do launch_node "$i"; done
    fi
    wait_healthy 90
    fk_log "reusing the ensemble on 127.0.0.1:$(port 1)-$(port 3)"
  fi
  fk_add_user "$D"
}

do_release() { fk_release "$D" do_stop; }

case "${1:-}" in
  start)   fk_locked "zk-ensemble-$CB" do_start; print_env ;;
  stop)    fk_locked "zk-ensemble-$CB" do_stop; rm -f "$D/acquired" ;;
  status)  do_status; healthy ;;
  acquire) fk_locked "zk-ensemble-$CB" do_acquire; print_env ;;
  release) fk_locked "zk-ensemble-$CB" do_release ;;
  leader)  leader_id ;;
  kill-leader)
    L=$(leader_id) || fk_die "no leader to kill"
    P=$(node_pid "$L") || fk_die "leader node $L was not started by this script"
    kill -KILL "$P"
    fk_wait_gone "$P" 100 || fk_die "leader pid $P still alive after SIGKILL"
    rm -f "$(pidfile "$L")"
    fk_log "killed leader node $L (pid $P)"
    echo "$L" ;;
  kill-node)
    check_id "${2:-}"
    P=$(node_pid "$2") || fk_die "node $2 is not running"
    kill -KILL "$P"
    fk_wait_gone "$P" 100 || fk_die "pid $P still alive after SIGKILL"
    rm -f "$(pidfile "$2")" ;;
  start-node)
    check_id "${2:-}"
    fk_locked "zk-ensemble-$CB-node" launch_node "$2"
    fk_zk_wait_serving "$(port "$2")" 60 || fk_die "node $2 not serving after 60 s"
    fk_log "node $2 serving as $(fk_zk_mode "$(port "$2")")" ;;
  stop-node)
    check_id "${2:-}"
    fk_stop_pidfile "$(pidfile "$2")" "$(cfg "$2")" ;;
  wait-healthy) wait_healthy "${2:-60}" ;;
  *) echo "usage: $0 start|stop|status|acquire|release|leader|kill-leader|kill-node N|start-node N|stop-node N|wait-healthy [S]" >&2; exit 2 ;;
esac
