#!/usr/bin/env bash
# The scale bench (issue #35), one family per run, under plain Node with --expose-gc:
#   npm run bench:scale -- <zookeeper|etcd|redis|redlock|postgres|stores> [--quick]
#   npm run bench:scale -- all [--quick]        (every family, one after the other)
# Builds the package, transpiles test/bench/scale/ (and the helpers it imports) into
# dist/test/bench/ (types stripped, nothing bundled: '../../../src/...' reaches the
# build), and runs test/bench/scale/run.ts there. Figures, baselines and the load are
# printed; charts go to docs/images/bench/scale-*.svg (test/bench/scale/results/quick/
# for --quick). Header of test/bench/scale/run.ts: what each section measures.
#
# Servers: the run starts its own, with the project's scripts (test/servers/), in a
# state dir of its own and on ports of its own, and stops them when it ends: 100,000
# locks must not land on servers other runs share (a shared ZooKeeper with a 256 MB
# heap ran out of it). The family's deployment: a 3-node ZooKeeper ensemble with
# FK_SCALE_ZK_HEAP (2g) per node, a 3-node etcd cluster (fsync on), Redis single and
# five Redlock nodes, a PostgreSQL cluster of its own (FK_PG_CLUSTER fkscale<base>: made once by
# pg_createcluster, started and stopped by each run).
#   FK_SCALE_SERVERS=env        use the servers the environment names instead
#   FK_SCALE_PORT_BASE (23000)  ports base+280.. ZooKeeper, base+389.. etcd,
#                               base+432 PostgreSQL, base+690.. Redis
#   FK_SCALE_STATE_DIR (/tmp/fencekeeper-scale)
set -euo pipefail
cd "$(dirname "$0")/../.."
family=${1:?usage: npm run bench:scale -- <zookeeper|etcd|redis|redlock|postgres|stores|all> [--quick]}
shift
# FK_SCALE_NO_BUILD=1: use dist/ as it is (two runs at once must not rebuild it under each other).
if [ -z "${FK_SCALE_NO_BUILD:-}" ]; then
npm run build >/dev/null
node_modules/.bin/esbuild test/bench/scale/*.ts test/bench/lib/chart.ts test/bench/closed-loop.ts \
  --format=esm --platform=node --log-level=warning --outbase=test/bench --outdir=dist/test/bench
fi

B=${FK_SCALE_PORT_BASE:-23000}
export FK_STATE_DIR=${FK_SCALE_STATE_DIR:-/tmp/fencekeeper-scale}
S=test/servers
zk() { FK_ZK_ENS_CLIENT_BASE=$((B + 280)) FK_ZK_ENS_SECURE_BASE=$((B + 290)) FK_ZK_ENS_PEER_BASE=$((B + 880)) \
  FK_ZK_ENS_ELECTION_BASE=$((B + 980)) FK_ZK_HEAP=${FK_SCALE_ZK_HEAP:-2g} bash $S/zk-ensemble.sh "$1"; }
etcd() { FK_ETCD_PORT=$((B + 389)) FK_ETCD_PEER_PORT=$((B + 489)) FK_ETCD_CLUSTER_BASE=$((B + 390)) \
  FK_ETCD_CLUSTER_PEER_BASE=$((B + 490)) bash $S/etcd.sh "$1"; }
redis() { FK_REDIS_BASE=$((B + 690)) bash $S/redis.sh "$1"; }
pgsql() { FK_PG_PORT=$((B + 432)) FK_PG_CLUSTER=fkscale$B bash $S/postgres.sh "$1"; }
servers_of() {
  case $1 in
    zookeeper) echo zk ;; etcd) echo etcd ;; redis | redlock) echo redis ;; postgres) echo pgsql ;; stores) echo "pgsql redis" ;;
  esac
}

STARTED=()
stop_started() {
  local s
  for s in "${STARTED[@]}"; do $s stop >/dev/null 2>&1 || echo "scale.sh: stopping $s failed" >&2; done
  STARTED=()
}
trap stop_started EXIT

run_family() {
  local f=$1 s
  shift
  if [ "${FK_SCALE_SERVERS:-own}" != env ]; then
    for s in $(servers_of "$f"); do
      # start prints the servers' URLs as NAME=value lines: they become this run's environment.
      while IFS= read -r line; do
        case $line in FK_*=* | DATABASE_URL=*) export "${line?}" ;; esac
      done < <($s start)
      STARTED+=("$s")
    done
  fi
  local rc=0
  node --expose-gc --disable-warning=FENCEKEEPER_SELF_WAIT dist/test/bench/scale/run.js "$f" "$@" || rc=$?
  stop_started
  return $rc
}

if [ "$family" = all ]; then
  for f in zookeeper etcd redis redlock postgres stores; do run_family "$f" "$@"; done
else
  run_family "$family" "$@"
fi
