#!/usr/bin/env bash
# MariaDB for fencekeeper/mysql's tests. Machines of this project already run
# MariaDB 10.11 (Debian 12's mariadb-server) on 127.0.0.1:3306, user root
# with no password; then this script only makes sure the `test` database
# exists. Where nothing answers, it installs Debian's mariadb-server and starts
# a server of its own (data in $FK_STATE_DIR/mariadb/data, bound to 127.0.0.1,
# no systemd), with root allowed in without a password from 127.0.0.1.
#
# usage: mariadb.sh start|stop|status|acquire|release   (see lib.sh for acquire/release)
#   stop only stops a server this script started.
# start and acquire print FK_MYSQL=mysql://root@127.0.0.1:PORT/test.
#
# env: FK_STATE_DIR (/tmp/fencekeeper-test) FK_MYSQL_PORT (3306) FK_MYSQL_DATABASE (test)
set -euo pipefail
FK_SCRIPT=mariadb
. "$(dirname "$0")/lib.sh"

PORT=${FK_MYSQL_PORT:-3306}
DB=${FK_MYSQL_DATABASE:-test}
D=$FK_STATE_DIR/mariadb
MARKER=$D/my.cnf

client() { mysql --protocol=tcp -h 127.0.0.1 -P "$PORT" -u root "$@"; }
answering() { command -v mysql >/dev/null && client -e 'select 1' >/dev/null 2>&1; }

print_env() { echo "FK_MYSQL=mysql://root@127.0.0.1:$PORT/$DB"; }

ensure_db() { client -e "CREATE DATABASE IF NOT EXISTS \`$DB\`"; }

do_start() {
  mkdir -p "$D"
  if fk_port_open "$PORT"; then
    answering || fk_die "something answers on 127.0.0.1:$PORT but root cannot log in without a password"
    fk_log "MariaDB answers on 127.0.0.1:$PORT"
  else
    start_server
  fi
  ensure_db
}

start_server() {
  fk_ensure_packages mariadb-server mariadb-client
  local t0
  t0=$(fk_now_ms)
  mkdir -p "$D/data" "$D/run"
  chown -R mysql:mysql "$D/data" "$D/run" 2>/dev/null || true
  cat >"$MARKER" <<CNF
[mysqld]
datadir=$D/data
socket=$D/run/mysqld.sock
pid-file=$D/run/mysqld.pid
bind-address=127.0.0.1
port=$PORT
user=mysql
CNF
  if [ ! -d "$D/data/mysql" ]; then
    mariadb-install-db --defaults-file="$MARKER" --auth-root-authentication-method=normal --skip-test-db >"$D/install.log" 2>&1 ||
      { tail -20 "$D/install.log" >&2; fk_die "mariadb-install-db failed"; }
  fi
  # 9>&-: the server must not inherit (and hold for ever) our flock on fd 9
  nohup mariadbd --defaults-file="$MARKER" >"$D/server.log" 2>&1 9>&- &
  echo $! >"$D/pid"
  fk_wait_until 60 0.2 answering || { tail -20 "$D/server.log" >&2; fk_die "MariaDB did not come up on 127.0.0.1:$PORT"; }
  : >"$D/acquired"
  fk_log "MariaDB started on 127.0.0.1:$PORT in $(fk_elapsed "$t0")s"
}

do_stop() { fk_stop_pidfile "$D/pid" "$MARKER"; }

do_acquire() {
  mkdir -p "$D"
  fk_live_users "$D" >/dev/null
  do_start
  fk_add_user "$D"
}

usage() { echo "usage: $0 start|stop|status|acquire|release"; }

case "${1:-}" in
  status) answering && echo "MariaDB answers on 127.0.0.1:$PORT" ;;
  *) fk_main "mariadb-$PORT" "$@" ;;
esac
