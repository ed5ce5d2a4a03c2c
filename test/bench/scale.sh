#!/usr/bin/env bash
# The scale bench (issue #35), one family per run, under plain Node with --expose-gc:
#   npm run bench:scale -- <zookeeper|etcd|redis|redlock|postgres|stores> [--quick]
#   npm run bench:scale -- all [--quick]        (every family, one after the other)
# Builds the package, transpiles test/bench/scale/ (and the helpers it imports) into
# dist/test/bench/ (types stripped, nothing bundled: '../../../src/...' reaches the
# build), and runs test/bench/scale/run.ts there. Figures, baselines and the load are
# printed; charts go to docs/images/bench/scale-*.svg (test/bench/scale/results/quick/
# for --quick). Header of test/bench/scale/run.ts: what each section measures.
set -euo pipefail
cd "$(dirname "$0")/../.."
npm run build >/dev/null
node_modules/.bin/esbuild test/bench/scale/*.ts test/bench/lib/chart.ts test/bench/closed-loop.ts \
  --format=esm --platform=node --log-level=warning --outbase=test/bench --outdir=dist/test/bench
family=${1:?usage: npm run bench:scale -- <zookeeper|etcd|redis|redlock|postgres|stores|all> [--quick]}
shift
if [ "$family" = all ]; then
  for f in zookeeper etcd redis redlock postgres stores; do
    node --expose-gc dist/test/bench/scale/run.js "$f" "$@"
  done
else
  exec node --expose-gc dist/test/bench/scale/run.js "$family" "$@"
fi
