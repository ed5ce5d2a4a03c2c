// Draw the latency charts again from the points a run saved, without measuring:
//   node node_modules/vite-node/vite-node.mjs test/bench/latency/redraw.ts FILE.json
import { readFile } from 'node:fs/promises';
import { writeLatencyCharts, type LatencyCharts } from './charts.js';

const file = process.argv.slice(2).find((arg) => arg !== '--');
if (file === undefined) throw new Error('usage: redraw.ts FILE.json (as run.ts saved it)');
for (const f of await writeLatencyCharts(JSON.parse(await readFile(file, 'utf8')) as LatencyCharts)) console.log(`wrote ${f}`);
