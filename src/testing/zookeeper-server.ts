/**
 * A throwaway standalone ZooKeeper for a test: its own port, its own data in
 * a temporary directory, settings made for tests, stopped (and its data
 * removed) by stop().
 *
 *   const server = await startZooKeeper();                  // a free port, ready to serve
 *   const zk = await ZooKeeperClient.connect({ connectString: server.connectString });
 *   ...
 *   await server.stop();
 *
 * It runs the ZooKeeper server of the machine's Java installation: Debian's
 * and Ubuntu's `zookeeper` package puts its jar at /usr/share/java (and pulls
 * in a Java runtime); elsewhere pass `classpath` with the jars of a ZooKeeper
 * 3.5 or later release (its lib/*.jar). The server is started the way its own
 * zkServer.sh starts it (QuorumPeerMain with a zoo.cfg), without a service
 * manager. Settings that differ from a production server's, and why:
 *   forceSync=no            no fsync per write: a test never pulls the plug
 *   admin.enableServer=false  the admin HTTP server would take port 8080
 *   4lw.commands.whitelist=*  srvr (readiness) and the other four-letter words
 *   extendedTypesEnabled    TTL nodes
 *   min/maxSessionTimeout   two ticks .. 60 s, so a test can ask for short sessions
 *   znode.container.checkIntervalMs (a JVM flag)  how often empty container
 *                           parents and expired TTL nodes are removed: 1 s
 *                           instead of 60 s, so a test can see it happen
 */
import { existsSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { InvalidArgumentError, ServerNotInstalledError } from '../errors.js';
import { ask, findExecutable, launch, requireExecutable, temporaryDirectory, type ThrowawayServer } from './server-process.js';

/** Where Debian's and Ubuntu's `zookeeper` package installs the server. */
const DEBIAN_JAR = '/usr/share/java/zookeeper.jar';
/** The logging backend the package ships beside it (the jar's manifest names the rest of its dependencies). */
const DEBIAN_LOGGER = '/usr/share/java/slf4j-simple.jar';

/** Settings of a throwaway ZooKeeper (startZooKeeper): its tick time and session bounds. */
export interface ZooKeeperServerOptions {
  /** The client port on 127.0.0.1. Default: a free one. */
  readonly port?: number;
  /** ZooKeeper's time unit. Default 200 ms: sessions of 400 ms and up, quick expiry. */
  readonly tickTimeMs?: number;
  /** Bounds the server puts on the session timeout clients ask for. Default: two ticks .. 60000 ms. */
  readonly minSessionTimeoutMs?: number;
  readonly maxSessionTimeoutMs?: number;
  /** How often empty containers and expired TTL nodes are removed. Default 1000 ms (the server's own default is 60000). */
  readonly containerCheckIntervalMs?: number;
  /** The java command. Default: $JAVA_HOME/bin/java when set, else java on PATH. */
  readonly java?: string;
  /** The server's jars. Default: Debian's /usr/share/java/zookeeper.jar (and slf4j-simple.jar for its log). */
  readonly classpath?: readonly string[];
  /** The JVM's heap. Default 128 MB. */
  readonly heapMb?: number;
  /** Give up if the server does not serve within this long. Default 60000 ms. */
  readonly startTimeoutMs?: number;
}

/** The JVM; its directory holds zoo.cfg, the data and zookeeper.log. */
export interface ZooKeeperServer extends ThrowawayServer {
  /** '127.0.0.1:port', for ZooKeeperClient.connect({ connectString }). */
  readonly connectString: string;
}

/**
 * Starts a throwaway ZooKeeper of the machine's packages on a free port of
 * 127.0.0.1, with test-friendly settings (short sessions allowed, empty lock
 * parents reaped within a second), its data removed by stop(). Rejects with
 * ServerNotInstalledError when ZooKeeper is missing.
 */
export async function startZooKeeper(options: ZooKeeperServerOptions = {}): Promise<ZooKeeperServer> {
  const tickTimeMs = positive(options.tickTimeMs ?? 200, 'tickTimeMs');
  const minSession = positive(options.minSessionTimeoutMs ?? 2 * tickTimeMs, 'minSessionTimeoutMs');
  const maxSession = positive(options.maxSessionTimeoutMs ?? 60_000, 'maxSessionTimeoutMs');
  if (maxSession < minSession) throw new InvalidArgumentError(`startZooKeeper(): maxSessionTimeoutMs (${maxSession}) is below minSessionTimeoutMs (${minSession})`);
  const checkInterval = positive(options.containerCheckIntervalMs ?? 1000, 'containerCheckIntervalMs');
  const heapMb = positive(options.heapMb ?? 128, 'heapMb');
  const startTimeoutMs = positive(options.startTimeoutMs ?? 60_000, 'startTimeoutMs');
  if (options.port !== undefined) port(options.port);

  const java = javaCommand(options.java);
  const classpath = serverClasspath(options.classpath);
  const directory = await temporaryDirectory('fencekeeper-zookeeper-');
  const dataDir = join(directory, 'data');
  const config = join(directory, 'zoo.cfg');
  const logFile = join(directory, 'zookeeper.log');
  const launched = await launch({
    what: 'ZooKeeper',
    command: java,
    port: options.port,
    logFile,
    startTimeoutMs,
    directory,
    args: () => [
      `-Xms${heapMb}m`,
      `-Xmx${heapMb}m`,
      '-XX:+UseSerialGC',
      '-Djava.net.preferIPv4Stack=true',
      `-Dznode.container.checkIntervalMs=${checkInterval}`,
      '-cp',
      classpath.join(':'),
      'org.apache.zookeeper.server.quorum.QuorumPeerMain',
      config,
    ],
    // The config names the port, so it is written for each port tried.
    prepare: (clientPort) => writeFile(config, zooCfg({ dataDir, clientPort, tickTimeMs, minSession, maxSession })),
    // `ruok` answers before the server can serve; only srvr's Mode line means ready.
    ready: async (clientPort) => /^Mode: /m.test(await ask(clientPort, 'srvr', 1000)),
  });
  return Object.freeze({ ...launched, connectString: `127.0.0.1:${launched.port}` });
}

function zooCfg(o: { dataDir: string; clientPort: number; tickTimeMs: number; minSession: number; maxSession: number }): string {
  return [
    `tickTime=${o.tickTimeMs}`,
    `dataDir=${o.dataDir}`,
    `clientPort=${o.clientPort}`,
    'clientPortAddress=127.0.0.1',
    'maxClientCnxns=0',
    'admin.enableServer=false',
    '4lw.commands.whitelist=*',
    'forceSync=no',
    'extendedTypesEnabled=true',
    `minSessionTimeout=${o.minSession}`,
    `maxSessionTimeout=${o.maxSession}`,
    '',
  ].join('\n');
}

function javaCommand(given: string | undefined): string {
  const install = 'a Java runtime (Debian/Ubuntu: apt-get install default-jre-headless; the zookeeper package pulls one in)';
  if (given !== undefined) return requireExecutable(given, install, 'startZooKeeper()');
  const home = process.env.JAVA_HOME;
  if (home !== undefined && home !== '') {
    const java = findExecutable(join(home, 'bin', 'java'));
    if (java !== null) return java;
  }
  return requireExecutable('java', install, 'startZooKeeper()');
}

function serverClasspath(given: readonly string[] | undefined): string[] {
  if (given !== undefined) {
    if (!Array.isArray(given) || given.length === 0) throw new InvalidArgumentError('startZooKeeper(): classpath must be a non-empty array of jar paths');
    for (const entry of given) {
      // A directory wildcard (lib/*) is Java's to expand.
      const file = entry.endsWith('/*') ? entry.slice(0, -2) : entry;
      if (!existsSync(file)) {
        throw new ServerNotInstalledError(entry, 'the jars of a ZooKeeper release (its lib/*.jar)', `startZooKeeper(): classpath entry ${entry} does not exist`);
      }
    }
    return [...given];
  }
  if (!existsSync(DEBIAN_JAR)) {
    throw new ServerNotInstalledError(
      DEBIAN_JAR,
      'ZooKeeper (Debian/Ubuntu: apt-get install zookeeper), or pass classpath with the jars of a ZooKeeper release',
      `startZooKeeper(): ZooKeeper is not installed here (no ${DEBIAN_JAR}); install it (Debian/Ubuntu: apt-get install zookeeper) or pass classpath with the jars of a ZooKeeper release (its lib/*.jar)`,
    );
  }
  return existsSync(DEBIAN_LOGGER) ? [DEBIAN_JAR, DEBIAN_LOGGER] : [DEBIAN_JAR];
}

function positive(value: number, name: string): number {
  if (!Number.isInteger(value) || value < 1 || value > 0x7fffffff) {
    throw new InvalidArgumentError(`startZooKeeper(): ${name} must be a positive integer, got ${String(value)}`);
  }
  return value;
}

function port(value: number): number {
  if (!Number.isInteger(value) || value < 1 || value > 65535) throw new InvalidArgumentError(`startZooKeeper(): port must be a TCP port (1..65535), got ${String(value)}`);
  return value;
}
