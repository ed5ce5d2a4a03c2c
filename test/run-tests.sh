#!/usr/bin/env bash
# What `npm test` runs: from a fresh Debian 12 with Node 20 (as root) to a
# finished vitest run against real servers.
#   1. node_modules (npm ci) if missing
#   2. the Debian packages the test servers need, all missing ones in one
#      apt-get update + install (a machine that has them pays nothing)
#   3. npm run build (the tests import the built package by its name), while
#      in the background the type check runs (npm run typecheck: tsc over
#      src, adapters and test; a type error fails the run before any test)
#      and the servers start: ZooKeeper standalone and ensemble, Ceph RGW,
#      PostgreSQL, dynalite (DynamoDB API) (test/servers/*.sh acquire: reuse one that answers, else
#      start it); their addresses are exported, so the vitest global setup
#      finds them set and starts nothing itself
#   4. vitest run, type tests included (test/**/*.test-d.ts, checked by tsc
#      through vitest's typecheck), the Express middleware's suites once per
#      supported Express major (vitest projects express5 and express4, see
#      vitest.config.ts); on exit, release the servers (stopping what was
#      started)
# Extra arguments go to vitest: `npm test -- test/unit`, `npm test -- -t proxy`.
# FK_NO_SERVERS=1 starts no server (unit tests only); FK_ZK_STANDALONE,
# FK_ZK_ENSEMBLE, DATABASE_URL, S3_ENDPOINT point at servers of your own.
# FK_MYSQL (mysql://root@127.0.0.1:3306/test) names a MariaDB/MySQL of your own.
set -euo pipefail
cd "$(dirname "$0")/.."
. test/servers/lib.sh
FK_SCRIPT=run-tests
t0=$(fk_now_ms)

if [ ! -d node_modules ]; then
  fk_log "node_modules missing: npm ci"
  npm ci --no-audit --no-fund >&2
fi

if [ -z "${FK_NO_SERVERS:-}" ]; then
  pkgs=()
  if [ -z "${FK_ZK_STANDALONE:-}" ] || [ -z "${FK_ZK_ENSEMBLE:-}" ]; then pkgs+=("${FK_PKGS_ZK[@]}"); fi
  [ -n "${S3_ENDPOINT:-}" ] || pkgs+=("${FK_PKGS_RGW[@]}")
  [ -n "${FK_REDIS:-}" ] || pkgs+=("${FK_PKGS_REDIS[@]}")
  [ -n "${FK_ETCD:-}" ] || pkgs+=("${FK_PKGS_ETCD[@]}")
  if [ -z "${DATABASE_URL:-}" ]; then
    # a running server needs only the client (psql, pg_isready)
    if ! fk_port_open "${FK_PG_PORT:-5432}"; then pkgs+=("${FK_PKGS_PG[@]}")
    elif ! command -v psql >/dev/null || ! command -v pg_isready >/dev/null; then pkgs+=(postgresql-client); fi
  fi
  # the PgBouncer test starts a private one in front of whichever PostgreSQL
  pkgs+=(pgbouncer)
  fk_ensure_packages "${pkgs[@]}"
fi

# Servers start while tsc builds: on two cores both are mostly waiting anyway.
work=$(mktemp -d)
scripts=()
pids=()
release() {
  local s
  for s in "${scripts[@]}"; do FK_USER_PID=$$ bash "test/servers/$s" release || true; done
  rm -rf "$work"
}
trap release EXIT
if [ -z "${FK_NO_SERVERS:-}" ]; then
  for entry in zk-standalone.sh:FK_ZK_STANDALONE zk-ensemble.sh:FK_ZK_ENSEMBLE postgres.sh:DATABASE_URL rgw.sh:S3_ENDPOINT redis.sh:FK_REDIS etcd.sh:FK_ETCD \
    dynalite.sh:FK_DYNAMODB mariadb.sh:FK_MYSQL; do
    script=${entry%%:*} given=${entry#*:}
    [ -z "${!given:-}" ] || continue
    FK_USER_PID=$$ bash "test/servers/$script" acquire >"$work/$script.env" 2>"$work/$script.log" &
    pids+=($!)
    scripts+=("$script")
  done
fi

# The build compiles only src/ and adapters/; the type check covers the tests too.
typecheck_t0=$(fk_now_ms)
npm run --silent typecheck >"$work/typecheck.log" 2>&1 &
typecheck_pid=$!

npm run --silent build >&2

typecheck_ok=1
wait "$typecheck_pid" || typecheck_ok=0
typecheck_s=$(fk_elapsed "$typecheck_t0")

failed=0
for i in "${!pids[@]}"; do
  script=${scripts[i]}
  if ! wait "${pids[i]}"; then failed=1; fi
  sed 's/^/[servers] /' "$work/$script.log" >&2
  while IFS='=' read -r name value; do
    if [[ "$name" =~ ^[A-Z][A-Z0-9_]*$ ]]; then export "$name=$value"; fi
  done <"$work/$script.env"
done
[ "$failed" = 0 ] || fk_die "a test server did not start (see above)"
# Reported after the servers are up, so that a failure leaves nothing half-started.
if [ "$typecheck_ok" = 1 ]; then
  fk_log "type check (tsc --noEmit -p .: src, adapters, test): ok in ${typecheck_s}s"
else
  cat "$work/typecheck.log" >&2
  fk_die "type check (tsc --noEmit -p .: src, adapters, test) FAILED in ${typecheck_s}s: errors above"
fi
fk_log "ready to test after $(fk_elapsed "$t0")s (vitest run, with the type tests of test/**/*.test-d.ts; the Express suites run on Express 5 and 4: projects |express5| and |express4|)"
npx vitest run "$@"
