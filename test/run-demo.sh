#!/usr/bin/env bash
# What `npm run demo` runs: installs (when missing) and starts the servers the
# demo uses (standalone ZooKeeper, PostgreSQL, Ceph RGW), or reuses ones that
# already answer; exports ZOOKEEPER / DATABASE_URL / S3_* for them; builds the
# package and runs `fencekeeper demo` (src/cli/demo/: the paused-holder story,
# played with real processes against those servers); and on exit stops what
# it started. Extra arguments go to `fencekeeper demo` (e.g. -- --unfenced).
set -euo pipefail
cd "$(dirname "$0")/.."
. test/servers/lib.sh
FK_SCRIPT=run-demo

[ -d node_modules ] || npm ci --no-audit --no-fund >&2
fk_ensure_packages "${FK_PKGS_ZK[@]}" "${FK_PKGS_RGW[@]}" postgresql-client
npm run --silent build >&2

export FK_USER_PID=$$
acquired=()
release() { local s; for s in "${acquired[@]}"; do bash "test/servers/$s" release || true; done; }
trap release EXIT
for s in zk-standalone.sh postgres.sh rgw.sh; do
  vars=$(bash "test/servers/$s" acquire)
  acquired+=("$s")
  while IFS='=' read -r name value; do
    if [[ "$name" =~ ^[A-Z][A-Z0-9_]*$ ]]; then export "$name=$value"; fi
  done <<<"$vars"
done
export ZOOKEEPER=$FK_ZK_STANDALONE
fk_log "servers ready: ZOOKEEPER=$ZOOKEEPER DATABASE_URL=$DATABASE_URL S3_ENDPOINT=$S3_ENDPOINT"
node dist/src/cli/main.js demo "$@"
