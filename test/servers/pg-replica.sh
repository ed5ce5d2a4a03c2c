#!/usr/bin/env bash
# A PostgreSQL primary and a streaming replica of its own, for the faults of
# npm run compare's PostgreSQL column and the fault checker's --source
# postgres: never the machine's shared server on 5432. Two clusters of the
# PostgreSQL 15 binaries (/usr/lib/postgresql/15/bin) in the state dir, run
# as the postgres user (initdb refuses root), on 127.0.0.1 only, trust auth.
# The replica is made with pg_basebackup and streams from the primary, through
# whatever port the caller names (a proxy of the caller's, to stall the stream).
#
# usage: pg-replica.sh start|stop|acquire|release           (see lib.sh)
#        pg-replica.sh rebuild-replica [UPSTREAM_PORT]  replica thrown away, made again
#                                                         from the primary, streaming from
#                                                         UPSTREAM_PORT (default: the primary's)
#        pg-replica.sh kill-primary      SIGKILL the primary's postmaster and its children
#        pg-replica.sh restart-primary   start the primary again (crash recovery)
#        pg-replica.sh stop-primary      fast shutdown of the primary
#        pg-replica.sh promote           promote the replica (waits until it is)
#        pg-replica.sh sync on|off       synchronous_standby_names = 'replica1' or ''
#        pg-replica.sh reset             after a failover: replica dropped, primary up, replica
#                                         rebuilt streaming directly, asynchronous
#        pg-replica.sh reset-primary     after a failover whose next step rebuilds the replica
#                                         anyway (rebuild-replica): replica stopped, primary up,
#                                         asynchronous; no pg_basebackup
# start and acquire print FK_PG_PRIMARY_URL, FK_PG_REPLICA_URL, FK_PG_REPLICA_PRIMARY_PORT,
# FK_PG_REPLICA_CTL.
#
# env: FK_STATE_DIR (/tmp/fencekeeper-test) FK_PG_REPLICA_PORT (25441; the replica: +1)
set -euo pipefail
FK_SCRIPT=pg-replica
FK_CTL_NAME=FK_PG_REPLICA_CTL
. "$(dirname "$0")/lib.sh"

BIN=/usr/lib/postgresql/15/bin
# Below the kernel's ephemeral range (32768-60999 here): a port in it can be
# taken by any outgoing connection of a busy test run (seen: the replica's
# 55442 was in use in a clean-clone run).
P1=${FK_PG_REPLICA_PORT:-25441}
P2=$((P1 + 1))
D=$FK_STATE_DIR/pg-replica-$P1
PRIMARY=$D/primary
REPLICA=$D/replica
DB=test

as_pg() { runuser -u postgres -- "$@"; }
ready() { "$BIN/pg_isready" -q -h 127.0.0.1 -p "$1" -t 2; }
psql_on() { local port=$1; shift; psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U root -d "$DB" "$@"; }

print_env() {
  echo "FK_PG_PRIMARY_URL=postgres://root@127.0.0.1:$P1/$DB"
  echo "FK_PG_REPLICA_URL=postgres://root@127.0.0.1:$P2/$DB"
  echo "FK_PG_REPLICA_PRIMARY_PORT=$P1"
}

# The postmaster of the cluster in $1, if it runs (its pid file's first line, checked against /proc).
postmaster_pid() {
  local pid
  [ -s "$1/postmaster.pid" ] || return 1
  pid=$(head -1 "$1/postmaster.pid")
  fk_is_ours "$pid" "$1" && echo "$pid"
}

start_cluster() { # DIR PORT
  as_pg "$BIN/pg_ctl" -D "$1" -l "$1.log" -o "-p $2 -k $D" -w -t 60 start >&2 9>&-
  fk_wait_until 60 0.1 ready "$2" || fk_die "the cluster in $1 did not answer on $2"
}

stop_cluster() { # DIR [MODE]
  postmaster_pid "$1" >/dev/null || return 0
  as_pg "$BIN/pg_ctl" -D "$1" -m "${2:-fast}" -w -t 60 stop >&2 || true
}

init_primary() {
  mkdir -p "$D"
  chown postgres: "$D"
  as_pg "$BIN/initdb" -D "$PRIMARY" -A trust -U postgres --no-sync >&2
  cat >>"$PRIMARY/postgresql.conf" <<EOF
# fencekeeper pg-replica.sh
listen_addresses = '127.0.0.1'
wal_level = replica
max_wal_senders = 4
max_replication_slots = 4
hot_standby = on
wal_keep_size = 256MB
fsync = off
full_page_writes = on
max_connections = 60
shared_buffers = 32MB
synchronous_standby_names = ''
EOF
  echo 'host replication all 127.0.0.1/32 trust' >>"$PRIMARY/pg_hba.conf"
  echo 'host all all 127.0.0.1/32 trust' >>"$PRIMARY/pg_hba.conf"
  start_cluster "$PRIMARY" "$P1"
  as_pg psql -X -q -h 127.0.0.1 -p "$P1" -d postgres -c "create role root superuser login" >&2
  as_pg psql -X -q -h 127.0.0.1 -p "$P1" -d postgres -c "create database $DB owner root" >&2
}

rebuild_replica() { # [UPSTREAM_PORT]
  local upstream=${1:-$P1} t0
  t0=$(fk_now_ms)
  stop_cluster "$REPLICA" immediate
  fk_safe_dir "$REPLICA"
  rm -rf "$REPLICA"
  as_pg "$BIN/pg_basebackup" -h 127.0.0.1 -p "$P1" -D "$REPLICA" -X stream -R -c fast --no-sync >&2
  # Later lines win: the replica streams through UPSTREAM_PORT, named replica1 (synchronous_standby_names).
  echo "primary_conninfo = 'host=127.0.0.1 port=$upstream user=postgres application_name=replica1'" >>"$REPLICA/postgresql.auto.conf"
  start_cluster "$REPLICA" "$P2"
  fk_log "replica rebuilt on $P2 (streaming through $upstream) in $(fk_elapsed "$t0")s"
}

kill_primary() {
  local pid child
  pid=$(postmaster_pid "$PRIMARY") || fk_die "the primary is not running"
  # Its children first, by pid (children of our own postmaster), then the postmaster:
  # a backend left alive would answer its connection a while after the "crash".
  kill -STOP "$pid"
  for child in $(ps -o pid= --ppid "$pid"); do kill -KILL "$child" 2>/dev/null || true; done
  kill -KILL "$pid"
  fk_wait_gone "$pid" 100 || fk_die "the primary's postmaster $pid survived SIGKILL"
  # PID 1 here never reaps orphans: the killed postmaster stays a zombie, and a
  # new postmaster would take the pid file's zombie for a live one and refuse
  # to start (its socket lock likewise). Every process of that cluster is dead: both are stale.
  rm -f "$PRIMARY/postmaster.pid" "$D/.s.PGSQL.$P1" "$D/.s.PGSQL.$P1.lock"
  echo "$pid"
}

promote() {
  as_pg "$BIN/pg_ctl" -D "$REPLICA" -w -t 60 promote >&2
  fk_wait_until 60 0.1 sh -c "[ \"\$(psql -X -tA -h 127.0.0.1 -p $P2 -U root -d $DB -c 'select pg_is_in_recovery()')\" = f ]" ||
    fk_die "the replica is still in recovery after promote"
}

set_sync() {
  local names=''
  [ "$1" = on ] && names=replica1
  psql_on "$P1" -c "alter system set synchronous_standby_names = '$names'" -c "select pg_reload_conf()" >/dev/null
}

reset() {
  stop_cluster "$REPLICA" immediate
  postmaster_pid "$PRIMARY" >/dev/null || start_cluster "$PRIMARY" "$P1"
  set_sync off
  rebuild_replica "$P1"
}

reset_primary() {
  stop_cluster "$REPLICA" immediate
  postmaster_pid "$PRIMARY" >/dev/null || start_cluster "$PRIMARY" "$P1"
  set_sync off
}

do_start() {
  mkdir -p "$D"
  [ -f "$PRIMARY/PG_VERSION" ] || init_primary
  postmaster_pid "$PRIMARY" >/dev/null || start_cluster "$PRIMARY" "$P1"
  set_sync off
  if ! postmaster_pid "$REPLICA" >/dev/null || [ ! -f "$REPLICA/standby.signal" ]; then rebuild_replica "$P1"; fi
}

do_stop() {
  stop_cluster "$REPLICA" fast
  stop_cluster "$PRIMARY" fast
  fk_log "stopped both clusters"
}

do_acquire() {
  mkdir -p "$D"
  fk_live_users "$D" >/dev/null
  if ! postmaster_pid "$PRIMARY" >/dev/null; then : >"$D/acquired"; fi
  do_start
  fk_add_user "$D"
}

usage() { sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//'; }

case "${1:-}" in
  rebuild-replica) fk_locked "pg-replica-$P1" rebuild_replica "${2:-$P1}" ;;
  kill-primary) fk_locked "pg-replica-$P1" kill_primary ;;
  restart-primary) fk_locked "pg-replica-$P1" start_cluster "$PRIMARY" "$P1" ;;
  stop-primary) fk_locked "pg-replica-$P1" stop_cluster "$PRIMARY" fast ;;
  promote) fk_locked "pg-replica-$P1" promote ;;
  sync) fk_locked "pg-replica-$P1" set_sync "${2:?on or off}" ;;
  reset) fk_locked "pg-replica-$P1" reset ;;
  reset-primary) fk_locked "pg-replica-$P1" reset_primary ;;
  *) fk_main "pg-replica-$P1" "$@" ;;
esac
