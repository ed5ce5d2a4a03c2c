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
. "$(dirname "$0")/nodes-lib.sh"

CB=${FK_ZK_ENS_CLIENT_BASE:-2280}
SB=${FK_ZK_ENS_SECURE_BASE:-2290}
PB=${FK_ZK_ENS_PEER_BASE:-2880}
EB=${FK_ZK_ENS_ELECTION_BASE:-3880}
TICK=${FK_ZK_ENS_TICK:-500}
IDS=(1 2 3)
NODES=("${IDS[@]}")
D=$FK_STATE_DIR/zk-ensemble
FK_CTL_NAME=FK_ZK_ENSEMBLE_CTL
LOCK=zk-ensemble-$CB
WHERE="127.0.0.1:$((CB + 1))-$((CB + 3))"
CLUSTER=ensemble
fk_safe_dir "$D"

port() { echo $((CB + $1)); }
sport() { echo $((SB + $1)); }
cfg() { echo "$D/n$1/zoo.cfg"; }
pidfile() { echo "$D/n$1/zk.pid"; }
node_marker() { cfg "$1"; }
check_id() { case "${1:-}" in 1|2|3) ;; *) fk_die "node id must be 1, 2 or 3, got '${1:-}'";; esac; }

usage() { echo "usage: $0 start|stop|status|acquire|release|leader|kill-leader|kill-node N|start-node N|stop-node N|wait-healthy [S]"; }

print_env() {
  local i hosts=()
  echo "FK_ZK_ENSEMBLE=$(node_urls "" "${IDS[@]}")"
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

# A node serves when it reports a Mode (cluster_healthy, nodes-lib.sh).
node_serves() { fk_zk_serving "$(port "$1")"; }

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

# do_acquire (nodes-lib.sh): nodes of ours from an earlier run, where a fault
# test may have left one down, are started again with their data; a foreign
# ensemble gets the same time to become healthy.
heal() {
  local i
  fk_zk_require
  for i in "${IDS[@]}"; do launch_node "$i"; done
  wait_healthy 90
}
wait_foreign() { wait_healthy 90; }

case "${1:-}" in
  status)  do_status; cluster_healthy ;;
  leader)  leader_id ;;
  kill-leader) kill_leader ;;
  kill-node) check_id "${2:-}"; running_pid "$2" >/dev/null; kill_node "$2" ;;
  start-node)
    check_id "${2:-}"
    fk_locked "zk-ensemble-$CB-node" launch_node "$2"
    fk_zk_wait_serving "$(port "$2")" 60 || fk_die "node $2 not serving after 60 s"
    fk_log "node $2 serving as $(fk_zk_mode "$(port "$2")")" ;;
  stop-node)
    check_id "${2:-}"
    fk_stop_pidfile "$(pidfile "$2")" "$(node_marker "$2")" ;;
  wait-healthy) wait_healthy "${2:-60}" ;;
  *) fk_main "$LOCK" "$@" ;;
esac
