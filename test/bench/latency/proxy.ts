// The delay proxy (test/servers/delay-proxy.c) from Node: start one in front of
// some 127.0.0.1 ports, read its counters (bytes, flights = round trips, its CPU),
// calibrate the round trip it really adds with a ping-pong beside a direct one,
// stop it by its PID. Used by the latency benches and the proxy's own test.
import { execFile } from 'node:child_process';
import { readFile, rm } from 'node:fs/promises';
import { createServer, connect, type AddressInfo, type Server, type Socket } from 'node:net';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const run = promisify(execFile);
const SCRIPT = fileURLToPath(new URL('../../servers/delay-proxy.sh', import.meta.url));

/** The proxy's counters (see delay-proxy.c): totals since it started. */
export interface ProxyStats {
  readonly connections: number;
  readonly bytesC2s: number;
  readonly bytesS2c: number;
  /** Reads, about the segments (or coalesced bursts) each way. */
  readonly readsC2s: number;
  readonly readsS2c: number;
  readonly flightsC2s: number;
  readonly flightsS2c: number;
  readonly lateUsMax: number;
  readonly lateUsMean: number;
  /** The proxy's own CPU time (user + system), microseconds. */
  readonly cpuUs: number;
}

export interface DelayProxy {
  readonly name: string;
  readonly pid: number;
  readonly oneWayUs: number;
  /** Target port -> the proxy's port in front of it. */
  readonly ports: ReadonlyMap<number, number>;
  port(target: number): number;
  stats(): Promise<ProxyStats>;
  stop(): Promise<void>;
}

/** A port free right now on 127.0.0.1 (the OS's pick; freed again before use). */
export async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

function parseStats(text: string): ProxyStats {
  const values = new Map<string, number>();
  for (const line of text.split('\n')) {
    const [key, value] = line.split(' ');
    if (key !== undefined && value !== undefined) values.set(key, Number(value));
  }
  const get = (key: string): number => {
    const value = values.get(key);
    if (value === undefined || Number.isNaN(value)) throw new Error(`delay proxy stats without ${key}: ${text}`);
    return value;
  };
  return {
    connections: get('connections'),
    bytesC2s: get('bytes_c2s'),
    bytesS2c: get('bytes_s2c'),
    readsC2s: get('reads_c2s'),
    readsS2c: get('reads_s2c'),
    flightsC2s: get('flights_c2s'),
    flightsS2c: get('flights_s2c'),
    lateUsMax: get('late_us_max'),
    lateUsMean: get('late_us_mean'),
    cpuUs: get('cpu_us'),
  };
}

/** Start proxy `name` adding `oneWayUs` each way in front of every port in `targets` (each gets a free port of its own). */
export async function startProxy(name: string, oneWayUs: number, targets: readonly number[]): Promise<DelayProxy> {
  const ports = new Map<number, number>();
  for (const target of targets) if (!ports.has(target)) ports.set(target, await freePort());
  const mappings = [...ports].map(([target, port]) => `${port}=${target}`);
  const { stdout } = await run('bash', [SCRIPT, 'start', name, String(Math.round(oneWayUs)), ...mappings]);
  const pid = Number(/FK_DELAY_PROXY_PID=(\d+)/.exec(stdout)?.[1]);
  const statsFile = /FK_DELAY_PROXY_STATS=(.+)/.exec(stdout)?.[1];
  if (!Number.isInteger(pid) || statsFile === undefined) throw new Error(`delay-proxy.sh start printed no PID: ${stdout}`);
  return {
    name,
    pid,
    oneWayUs,
    ports,
    port(target) {
      const port = ports.get(target);
      if (port === undefined) throw new Error(`proxy ${name} is not in front of port ${target}`);
      return port;
    },
    async stats() {
      // Read by signal rather than through the script: a bench reads it between rounds.
      await rm(statsFile, { force: true });
      process.kill(pid, 'SIGUSR1');
      for (let i = 0; i < 500; i += 1) {
        const text = await readFile(statsFile, 'utf8').catch(() => '');
        if (text.endsWith('end\n')) return parseStats(text);
        await new Promise((resolve) => setTimeout(resolve, 2));
      }
      throw new Error(`delay proxy ${name} wrote no stats`);
    },
    async stop() {
      await run('bash', [SCRIPT, 'stop', name]);
    },
  };
}

/** A TCP echo server on 127.0.0.1 (for calibration and the proxy's test). */
export async function echoServer(): Promise<{ port: number; close(): Promise<void> }> {
  const sockets = new Set<Socket>();
  const server: Server = createServer((socket) => {
    sockets.add(socket);
    socket.setNoDelay(true);
    socket.on('close', () => sockets.delete(socket));
    socket.on('error', () => {});
    socket.pipe(socket);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as AddressInfo).port,
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}

export async function connectTo(port: number): Promise<Socket> {
  const socket = connect({ host: '127.0.0.1', port });
  socket.setNoDelay(true);
  await new Promise<void>((resolve, reject) => {
    socket.once('connect', resolve);
    socket.once('error', reject);
  });
  return socket;
}

/** One byte out and back, `count` times on one connection: each round trip's time, ms. */
export async function pingPong(socket: Socket, count: number): Promise<number[]> {
  const times: number[] = [];
  for (let i = 0; i < count; i += 1) {
    const t0 = performance.now();
    await new Promise<void>((resolve) => {
      socket.once('data', () => resolve());
      socket.write('x');
    });
    times.push(performance.now() - t0);
  }
  return times;
}

export function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

export function quantile(values: readonly number[], q: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  const pos = (sorted.length - 1) * q;
  const lo = Math.floor(pos);
  const hi = Math.ceil(pos);
  return sorted[lo]! + (sorted[hi]! - sorted[lo]!) * (pos - lo);
}

/** What the proxy adds, measured: ping-pong through it beside the same ping-pong direct, in alternating rounds. */
export interface Calibration {
  readonly directMs: number;
  readonly proxiedMs: number;
  /** proxied - direct, medians: the round trip the proxy really adds. */
  readonly addedMs: number;
  /** The proxy's CPU per round trip it carried, microseconds. */
  readonly proxyCpuUsPerRoundTrip: number;
}

export async function calibrate(oneWayUs: number, rounds = 5, perRound = 200): Promise<Calibration> {
  const echo = await echoServer();
  const proxy = await startProxy(`calibrate-${process.pid}`, oneWayUs, [echo.port]);
  try {
    const direct = await connectTo(echo.port);
    const proxied = await connectTo(proxy.port(echo.port));
    const d: number[] = [];
    const p: number[] = [];
    await pingPong(direct, 20);
    await pingPong(proxied, 20);
    const before = await proxy.stats();
    for (let r = 0; r < rounds; r += 1) {
      d.push(...(await pingPong(direct, perRound)));
      p.push(...(await pingPong(proxied, perRound)));
    }
    const after = await proxy.stats();
    direct.destroy();
    proxied.destroy();
    const directMs = median(d);
    const proxiedMs = median(p);
    return { directMs, proxiedMs, addedMs: proxiedMs - directMs, proxyCpuUsPerRoundTrip: (after.cpuUs - before.cpuUs) / p.length };
  } finally {
    await proxy.stop();
    await echo.close();
  }
}
