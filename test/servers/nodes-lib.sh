# A set of server processes, one per node, driven by one script (redis.sh,
# etcd.sh, zk-ensemble.sh): the commands every such set has. Source me; don't
# run me.
#
# The script defines, then ends with `case ... *) fk_nodes_main "$@" ;; esac`:
#   D NODES LOCK TURN WHERE   state dir; node names; start/stop lock; fault turn
#                             (faults-lib.sh); the ports, for messages
#   port N                    the node's client port
#   pidfile N, node_marker N  its PID file, and what the /proc/PID/cmdline of
#                             the process we started contains (lib.sh)
#   resolve ARG               the node named by ARG (a name or a port) for the
#                             fault commands, or exit with a message
#   restart_node N            SIGKILL N if it runs, start it with its data, wait
#   do_start, heal, do_status, print_env, usage
#   wait_foreign              wait until a set this script did not start serves
#   FK_CTL_NAME               the variable that names this script for the tests (lib.sh)
# A set with a leader (etcd.sh, zk-ensemble.sh) also defines IDS (the nodes
# that elect one), leader_id (the leader's id, or 1), node_serves N, and
# CLUSTER (its name, for messages), for cluster_healthy, wait_healthy and
# kill_leader. zk-ensemble.sh keeps commands of its own and uses the functions
# here, not fk_nodes_main.

. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
. "$(dirname "${BASH_SOURCE[0]}")/faults-lib.sh"

node_pid() { fk_pid_from "$(pidfile "$1")" "$(node_marker "$1")"; }

# True when this state dir's script started the nodes (acquire's marker, or
# any PID file naming a live node of ours).
ours() {
  local n
  [ -e "$D/acquired" ] && return 0
  for n in "${NODES[@]}"; do node_pid "$n" >/dev/null && return 0; done
  return 1
}

# The node among NODE... ($2...) that ARG ($1) names, by its name or its port; 1 if none.
node_named() {
  local arg=$1 n; shift
  for n in "$@"; do
    if [ "$arg" = "$n" ] || [ "$arg" = "$(port "$n")" ]; then echo "$n"; return 0; fi
  done
  return 1
}

# PREFIX127.0.0.1:PORT of each NODE... ($2...), comma-separated.
node_urls() {
  local prefix=$1 n urls=(); shift
  for n in "$@"; do urls+=("${prefix}127.0.0.1:$(port "$n")"); done
  (IFS=,; echo "${urls[*]}")
}

kill_node() {
  local n=$1 pid
  pid=$(node_pid "$n") || return 0
  # a paused process dies of SIGKILL too
  kill -KILL "$pid"
  fk_wait_gone "$pid" 100 || fk_die "node $n (pid $pid) still alive after SIGKILL"
  rm -f "$(pidfile "$n")"
  fk_log "killed node $n (pid $pid, port $(port "$n"))"
}

# "PID running|paused", or "- down".
node_state() {
  local pid
  if pid=$(node_pid "$1"); then
    if [ "$(fk_proc_state "$pid")" = T ]; then echo "$pid paused"; else echo "$pid running"; fi
  else
    echo "- down"
  fi
}

resume_all() {
  local n pid
  for n in "${NODES[@]}"; do
    if pid=$(node_pid "$n"); then kill -CONT "$pid"; fi
  done
}

do_stop() {
  local n
  resume_all   # a paused node cannot act on SIGTERM
  for n in "${NODES[@]}"; do fk_stop_pidfile "$(pidfile "$n")" "$(node_marker "$n")"; done
}

# Every node of IDS whose process runs (or, for a cluster this script did not
# start, that accepts connections) serves, and one of them leads.
cluster_healthy() {
  local i any=0
  for i in "${IDS[@]}"; do
    if node_pid "$i" >/dev/null || { [ ! -s "$(pidfile "$i")" ] && fk_port_open "$(port "$i")"; }; then
      any=1
      node_serves "$i" || return 1
    fi
  done
  [ "$any" = 1 ] && leader_id >/dev/null
}

wait_healthy() {
  fk_wait_until "${1:-60}" 0.05 cluster_healthy && return 0
  fk_log "$CLUSTER not healthy after ${1:-60} s:"
  do_status >&2 || true
  return 1
}

# SIGKILL the leader, wait until it is gone, print its id.
kill_leader() {
  local l
  l=$(leader_id) || fk_die "no leader to kill"
  running_pid "$l" >/dev/null
  kill_node "$l"
  echo "$l"
}

do_acquire() {
  mkdir -p "$D"
  fk_live_users "$D" >/dev/null
  local n answering=0
  for n in "${NODES[@]}"; do fk_port_open "$(port "$n")" && answering=1; done
  if [ "$answering" = 0 ] && ! ours; then
    do_start
    : >"$D/acquired"
  elif ours; then
    # ours from an earlier run: a fault test may have left a node down or paused
    heal
    fk_log "reusing the nodes on $WHERE"
  else
    # somebody else's (another state dir, or a developer's): all must serve
    wait_foreign
    fk_log "reusing the nodes on $WHERE (not started here)"
  fi
  fk_add_user "$D"
}

# The fault commands' node, in N.
node_arg() { N=$(resolve "${1:-}"); }
running_pid() { node_pid "$1" || fk_die "node $1 is not running"; }

fk_nodes_main() {
  local pid
  case "${1:-}" in
    status)  do_status ;;
    heal)
      ours || fk_die "no nodes of $D to heal: this script did not start them (start or acquire first)"
      fk_locked "$LOCK" heal
      fk_print_env ;;
    kill)    node_arg "${2:-}"; running_pid "$N" >/dev/null; kill_node "$N" ;;
    restart)
      node_arg "${2:-}"
      fk_locked "$LOCK" restart_node "$N"
      fk_log "node $N serving again on 127.0.0.1:$(port "$N") (pid $(node_pid "$N"))" ;;
    pause)
      node_arg "${2:-}"
      pid=$(running_pid "$N")
      fk_pause_pid "$pid"
      fk_log "paused node $N (pid $pid)" ;;
    resume)
      node_arg "${2:-}"
      fk_resume_pid "$(running_pid "$N")"
      fk_log "resumed node $N" ;;
    pid)     node_arg "${2:-}"; running_pid "$N" ;;
    port)    node_arg "${2:-}"; port "$N" ;;
    hold-faults)    fk_hold_faults "$TURN" "${2:-600}" ;;
    release-faults) fk_release_faults "$TURN" ;;
    *) fk_main "$LOCK" "$@" ;;
  esac
}
