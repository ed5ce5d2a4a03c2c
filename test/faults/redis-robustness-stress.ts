// The long run of test/integration/redis/robustness.test.ts's Redlock stress:
// three private Redis nodes (ports FK_PORT..FK_PORT+2, default 16515), each
// behind a proxy, contenders acquiring and releasing one lock while nodes are
// paused, SIGKILLed and restarted from their AOF, and cut off, counting
// unhandled rejections (the process survives them here, to count them all).
//   node node_modules/vite-node/vite-node.mjs test/faults/redis-robustness-stress.ts
//   env: FK_SECONDS (default 120), FK_CONTENDERS (default 3),
//        FK_TARGETED=0 (only faults at random moments: no pause aimed at a resubscribe),
//        FK_GAP_MS (default 100: between faults, gapMs..3*gapMs)
import { PrivateRedis } from '../helpers/private-redis.js';
import { redlockStress } from '../helpers/redis-robustness.js';

const base = Number(process.env.FK_PORT ?? 16515);
const seconds = Number(process.env.FK_SECONDS ?? 120);
const contenders = Number(process.env.FK_CONTENDERS ?? 3);
const targeted = process.env.FK_TARGETED !== '0';
const gapMs = Number(process.env.FK_GAP_MS ?? 100);
const unhandled: string[] = [];
process.on('unhandledRejection', (reason) => {
  unhandled.push(String((reason as Error)?.stack ?? reason));
});
const nodes = await Promise.all([0, 1, 2].map((i) => PrivateRedis.start(base + i)));
const cpu = process.cpuUsage();
try {
  const f = await redlockStress(nodes, seconds * 1000, { contenders, targeted, gapMs });
  let increasing = true;
  for (let i = 1; i < f.tokens.length; i++) if (f.tokens[i]! <= f.tokens[i - 1]!) increasing = false;
  const used = process.cpuUsage(cpu);
  console.log(JSON.stringify({ seconds, contenders, targeted, gapMs, grants: f.grants, gaveUp: f.gaveUp, noQuorum: f.noQuorum, faults: f.faults, tokensIncrease: increasing, unhandled: unhandled.length, cpuMs: Math.round((used.user + used.system) / 1000), loadavg: (await import('node:fs')).readFileSync('/proc/loadavg', 'utf8').trim() }));
  for (const u of new Set(unhandled)) console.log(`unhandled rejection:\n${u}`);
} finally {
  await Promise.all(nodes.map((n) => n.stop()));
}
process.exit(unhandled.length === 0 ? 0 : 1);
