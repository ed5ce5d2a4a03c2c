import { readFileSync } from 'node:fs';

// The benchmarks' servers run in child processes that answer 'cpu' with
// { cpu: microseconds of user + system CPU so far }: ask one.
export function serverCpu(child) {
  return new Promise((resolve) => {
    const onMessage = (message) => {
      if (typeof message?.cpu === 'number') {
        child.off('message', onMessage);
        resolve(message.cpu);
      }
    };
    child.on('message', onMessage);
    child.send('cpu');
  });
}

const TICK_MS = 10; // USER_HZ is 100 on Linux

/** CPU ticks (utime + stime, fields 14 and 15 of /proc/<pid>/stat) of these processes so far; NaN for one that is not on this machine. */
export function ticksOf(pids) {
  let ticks = 0;
  for (const pid of pids) {
    try {
      const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
      ticks += Number(fields[11]) + Number(fields[12]);
    } catch {
      return Number.NaN;
    }
  }
  return ticks;
}

/**
 * The PostgreSQL backends behind `connections` connections of `pool` (all
 * checked out at once to learn their pids): a function answering the
 * milliseconds of CPU they have used so far.
 */
export async function backendCpuMs(pool, connections) {
  const clients = await Promise.all(Array.from({ length: connections }, () => pool.connect()));
  const pids = await Promise.all(clients.map(async (c) => (await c.query('SELECT pg_backend_pid() AS pid')).rows[0].pid));
  for (const c of clients) c.release();
  return () => ticksOf(pids) * TICK_MS;
}
