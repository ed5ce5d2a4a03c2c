#!/usr/bin/env bash
# PostgreSQL for tests. Machines of this project (and CI) already run
# PostgreSQL 15 on 127.0.0.1:5432 with trust auth; then this script only finds
# a role that can log in and makes sure the `test` database exists. Where
# nothing answers, it installs Debian's `postgresql`, configures the cluster
# for 127.0.0.1 + trust auth and starts it without systemd.
#
# usage: postgres.sh start|stop|status|acquire|release   (see lib.sh for acquire/release)
#   stop only stops a cluster this script started.
# start and acquire print DATABASE_URL=postgres://ROLE@127.0.0.1:PORT/test.
#
# env: FK_STATE_DIR (/tmp/fencekeeper-test) FK_PG_PORT (5432) FK_PG_DATABASE (test)
#      FK_PG_VERSION (newest installed, 15 on Debian 12) FK_PG_CLUSTER (main)
set -euo pipefail
FK_SCRIPT=postgres
. "$(dirname "$0")/lib.sh"

PORT=${FK_PG_PORT:-5432}
DB=${FK_PG_DATABASE:-test}
CLUSTER=${FK_PG_CLUSTER:-main}
D=$FK_STATE_DIR/postgres
ROLE=

pg_version() {
  [ -n "${FK_PG_VERSION:-}" ] && { echo "$FK_PG_VERSION"; return; }
  ls /usr/lib/postgresql 2>/dev/null | sort -n | tail -1
}

answering() { command -v pg_isready >/dev/null && pg_isready -q -h 127.0.0.1 -p "$PORT" -t 2; }
psql_as() { local role=$1 db=$2; shift 2; psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PORT" -U "$role" -d "$db" "$@"; }

# The first of root, postgres that logs in (trust auth), then the database.
find_role_and_db() {
  local r
  for r in root postgres; do
    if psql_as "$r" postgres -tAc 'select 1' >/dev/null 2>&1; then ROLE=$r; break; fi
  done
  [ -n "$ROLE" ] || fk_die "neither role root nor postgres can log in to 127.0.0.1:$PORT (trust auth expected)"
  if [ "$(psql_as "$ROLE" postgres -tAc "select 1 from pg_database where datname = '$DB'")" != 1 ]; then
    psql_as "$ROLE" postgres -c "create database \"$DB\""
    fk_log "created database $DB"
  fi
}

print_env() { echo "DATABASE_URL=postgres://$ROLE@127.0.0.1:$PORT/$DB"; }

start_cluster() {
  fk_ensure_packages "${FK_PKGS_PG[@]}"
  local v t0 conf hba
  t0=$(fk_now_ms)
  v=$(pg_version)
  [ -n "$v" ] || fk_die "no PostgreSQL server version under /usr/lib/postgresql"
  if ! pg_lsclusters -h 2>/dev/null | awk '{print $1" "$2}' | grep -qx "$v $CLUSTER"; then
    pg_createcluster -p "$PORT" "$v" "$CLUSTER" >&2
  fi
  conf=/etc/postgresql/$v/$CLUSTER
  hba=$conf/pg_hba.conf
  # loopback only; trust auth for local sockets and 127.0.0.1 (test machines only)
  if ! grep -q '^# fencekeeper-test' "$hba"; then
    { echo '# fencekeeper-test: trust on loopback'
      echo 'local all all trust'
      echo 'host all all 127.0.0.1/32 trust'
      cat "$hba"; } >"$hba.new"
    mv "$hba.new" "$hba"
  fi
  sed -i -E "s/^#?listen_addresses *=.*/listen_addresses = '127.0.0.1'/" "$conf/postgresql.conf"
  # 9>&-: the server must not inherit (and hold for ever) our flock on fd 9
  pg_ctlcluster --skip-systemctl-redirect "$v" "$CLUSTER" start >&2 9>&-
  local i
  for i in $(seq 1 300); do answering && break; sleep 0.1; done
  answering || fk_die "PostgreSQL $v/$CLUSTER did not come up on 127.0.0.1:$PORT"
  # `root` (the usual login here) as a superuser
  su postgres -c "psql -X -q -p $PORT -tAc \"select 1 from pg_roles where rolname = 'root'\"" | grep -q 1 ||
    su postgres -c "psql -X -q -p $PORT -c 'create role root superuser login'" >&2
  echo "$v" >"$D/started-version"
  fk_log "PostgreSQL $v/$CLUSTER started on 127.0.0.1:$PORT in $(fk_elapsed "$t0")s"
}

stop_cluster() {
  [ -s "$D/started-version" ] || return 0
  pg_ctlcluster --skip-systemctl-redirect "$(cat "$D/started-version")" "$CLUSTER" stop >&2 || true
  rm -f "$D/started-version"
  fk_log "stopped the cluster this script started"
}

do_start() {
  mkdir -p "$D"
  if answering; then
    fk_log "PostgreSQL answers on 127.0.0.1:$PORT"
  else
    start_cluster
    : >"$D/acquired"
  fi
  command -v psql >/dev/null || fk_ensure_packages postgresql-client
  find_role_and_db
  print_env   # here: ROLE is only known inside the locked subshell
}

do_acquire() {
  mkdir -p "$D"
  fk_live_users "$D" >/dev/null
  do_start
  fk_add_user "$D"
}

do_release() {
  [ -d "$D" ] || return 0
  fk_remove_user "$D"
  if [ -e "$D/acquired" ] && [ "$(fk_live_users "$D")" -eq 0 ]; then
    stop_cluster
    rm -f "$D/acquired"
  fi
}

case "${1:-}" in
  start)   fk_locked "postgres-$PORT" do_start ;;
  stop)    fk_locked "postgres-$PORT" stop_cluster; rm -f "$D/acquired" ;;
  status)  answering && echo "PostgreSQL answers on 127.0.0.1:$PORT" ;;
  acquire) fk_locked "postgres-$PORT" do_acquire ;;
  release) fk_locked "postgres-$PORT" do_release ;;
  *) echo "usage: $0 start|stop|status|acquire|release" >&2; exit 2 ;;
esac
