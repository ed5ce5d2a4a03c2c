#!/usr/bin/env bash
# Run a TypeScript benchmark of test/bench/ the way users run the library: the
# built package (dist/) under plain Node, not through vite-node.
#
#   bash test/bench/plain.sh redis-bench      (env as the bench's own header says)
#
# Why: vite-node runs our source through its module runner (imports read
# through getters, node: built-ins such as perf_hooks handed out behind a
# Proxy), while the peers a bench compares with (npm redlock, etcd3's Lock)
# load from node_modules as plain Node modules. That tilts a same-run ratio
# against our code by a few percent, about what some aims are about.
# Here the bench is transpiled (types stripped, nothing bundled) into
# dist/test/bench/, so its '../../src/...' and '../../adapters/...' imports reach the build.
set -euo pipefail
cd "$(dirname "$0")/../.."
name=${1:?usage: bash test/bench/plain.sh BENCH (a test/bench/*.ts without .ts)}
shift
[ -f "test/bench/$name.ts" ] || { echo "plain.sh: no test/bench/$name.ts" >&2; exit 64; }
npm run build >/dev/null
mkdir -p dist/test/bench
node_modules/.bin/esbuild "test/bench/$name.ts" --format=esm --platform=node --log-level=warning --outfile="dist/test/bench/$name.mjs"
# The bench's own helpers beside it (./closed-loop.js ...), transpiled the same way.
for helper in $(grep -oE "from '\./[A-Za-z0-9_-]+\.js'" "test/bench/$name.ts" | sed -E "s/from '\.\/(.*)\.js'/\1/"); do
  node_modules/.bin/esbuild "test/bench/$helper.ts" --format=esm --platform=node --log-level=warning --outfile="dist/test/bench/$helper.js"
done
exec node "dist/test/bench/$name.mjs" "$@"
