// Reproduction (run: node node_modules/vite-node/vite-node.mjs test/faults/repro-http-abort-after-write.ts):
// fencing() aborts a request's admission when the client's connection closes
// before the response finished, even after the handler has written. With a
// store whose admission cannot undo the handler's writes (MemoryFenceStore, or
// any write not made through req.fencing.transaction), the resource has then
// applied a write with token 20 while its mark stays below 20, and a stale
// holder with token 15 is admitted and writes after it: 20 then 15.
// Exit 1 when the stale write got in (the bug), 0 when it was refused.
import { once } from 'node:events';
import { createServer, request } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import express from 'express';
import { fencing, MemoryFenceStore } from '../../adapters/express/index.js';

const applied: string[] = [];
const app = express();
app.put('/r', fencing({ store: new MemoryFenceStore(), resource: 'r' }), async (req, res) => {
  applied.push(String(req.fencing?.token)); // the write (a log, a file, another service)
  await sleep(100); // e.g. a second step before answering
  res.status(204).end();
});
const server = createServer(app).listen(0, '127.0.0.1');
await once(server, 'listening');
const { port } = server.address() as { port: number };

function put(token: string, hangUpAfterMs?: number): Promise<number | 'hung up'> {
  return new Promise((resolve) => {
    const req = request({ host: '127.0.0.1', port, path: '/r', method: 'PUT', headers: { 'fencing-token': token } }, (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
    req.on('error', () => resolve('hung up'));
    req.end();
    if (hangUpAfterMs !== undefined) setTimeout(() => req.destroy(), hangUpAfterMs);
  });
}

console.log('token 10:', await put('10'));
console.log('token 20, client hangs up after the handler wrote:', await put('20', 50));
await sleep(200);
console.log('token 15 (stale: 20 was applied):', await put('15'));
console.log('applied in order:', applied.join(', '));
server.close();
const bad = applied.indexOf('15') > applied.indexOf('20');
console.log(bad ? 'BUG: token 15 was applied after token 20' : 'ok: the stale token was refused');
process.exit(bad ? 1 : 0);
