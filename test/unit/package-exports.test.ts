// What users get: the built package, imported by its name through the
// `exports` map (a package may import itself by name), not the sources.
// `npm test` builds first; run `npm run build` before running this file alone.
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { beforeAll, describe, expect, it } from 'vitest';
import { StaleTokenError as SourceStaleTokenError } from '../../src/errors.js';

const root = fileURLToPath(new URL('../../', import.meta.url));
const dist = join(root, 'dist');

interface PackageJson {
  name: string;
  exports: Record<string, string | { types: string; default: string }>;
}
const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as PackageJson;

// Specifiers kept in variables so TypeScript and vite don't resolve them
// ahead of the run (a missing dist/ should fail here, with a clear message).
const load = (specifier: string): Promise<Record<string, unknown>> =>
  import(/* @vite-ignore */ specifier) as Promise<Record<string, unknown>>;

beforeAll(() => {
  if (!existsSync(join(dist, 'src', 'index.js'))) {
    throw new Error('dist/ is missing: run `npm run build` first (`npm test` does it for you)');
  }
});

const ERROR_CLASSES = [
  'FencekeeperError',
  'StaleTokenError',
  'InvalidTokenError',
  'InvalidArgumentError',
  'LockLostError',
  'LockTimeoutError',
  'SessionExpiredError',
  'ConnectionLossError',
  'ClientClosedError',
  'ProtocolError',
  'UnknownOutcomeError',
  'ZooKeeperError',
  'LayoutMismatchError',
  'RepeatedBodyError',
  'CorruptFenceError',
  'WorkNotCommittedError',
  'CommitFailedError',
  'FenceReleasedError',
  'EffectPendingError',
  'EffectFailedError',
  'TlsError',
  'QuorumError',
  'ListenUnavailableError',
  'AclMismatchError',
  'NoCurrentLockError',
  'SequencerMismatchError',
  'FenceAlreadyBoundError',
  'SchemaMissingError',
  'LockUpgradeError',
  'LockOrderError',
  'AmbiguousLockError',
  'PermitsMismatchError',
];

// The public contract, entry point by entry point: every runtime export is
// listed (functions, classes, and other values such as constants), and the
// test below compares the exact set, so a new export must be added here
// (deliberately: it becomes public API) and a removed one is noticed.
const CONTRACT: Record<string, { functions: string[]; classes: string[]; values: string[] }> = {
  fencekeeper: {
    functions: [
      'parseToken', 'formatToken', 'assertToken', 'withLock', 'withReadLock', 'withWriteLock', 'acquireLocks', 'withLocks',
      'sequencer', 'isSequencer', 'parseSequencer', 'formatSequencer', 'parseFencing', 'resolveFencing',
      'currentLock', 'fenceBinding', 'matchesBinding',
    ],
    classes: [...ERROR_CLASSES],
    values: ['MAX_TOKEN', 'CHANNELS', 'TRACING_CHANNELS', 'CURRENT_LOCK', 'RUN_WITHIN', 'SEQUENCER_FORMAT'],
  },
  'fencekeeper/extend': {
    functions: [
      'safetyMargin', 'grantSequencer', 'assertLockName', 'formatBinding', 'parseBinding',
      'traceAcquire', 'traceRelease', 'traceCampaign', 'traceAdmit', 'traceEffect', 'traceFencedWrite', 'traceWithFence',
      'traceS3Put', 'traceS3Delete', 'publishSessionState', 'publishSourceActivity', 'publishRefused', 'publishUnknownOutcome',
      'fenceAdvances', 'checkWaitOptions', 'fenceAdmits', 'markAfter', 'refuseCheckOnly',
      'lockGrant', 'leadershipGrant', 'joinQueue', 'noteGrant', 'forgetGrant', 'warnIfSelfWait',
    ],
    classes: ['StepDownClock', 'SourceIdentityCache', 'QueueGrant', 'QueueObserver', 'QueueStopper', 'WaitGroup'],
    values: ['DEFAULT_OWNER', 'CHECK_ONLY_FIRST_MARK', 'SELF_WAIT_WARNING'],
  },
  'fencekeeper/zookeeper': {
    functions: [
      'acquireLock', 'tryAcquireLock', 'lockStatus', 'observeLock', 'campaign', 'observeLeader',
      'acquireReadLock', 'tryAcquireReadLock', 'acquireWriteLock', 'tryAcquireWriteLock', 'acquirePermit', 'tryAcquirePermit',
      'zookeeperSource', 'zookeeperSourceId', 'tlsConnector', 'tcpConnector', 'digestAclId', 'verifyWithZooKeeper', 'queuePath',
    ],
    classes: ['ZooKeeperClient'],
    values: ['Perms', 'OPEN_ACL_UNSAFE', 'READ_ACL_UNSAFE', 'CREATOR_ALL_ACL'],
  },
  'fencekeeper/postgres': {
    functions: [
      'migrate', 'loadMigrations', 'migrationsDirectory',
      'withFence', 'fencedUpdate', 'fencedInsert', 'fencedUpsert', 'fencedDelete', 'fenced', 'bindTable', 'tableBindingOf',
      'bindFence', 'fenceBindingOf', 'withEffect', 'pendingEffects', 'listEffects', 'settlePendingEffect', 'effectIdempotencyKey',
      'postgresSource', 'withLease',
    ],
    classes: ['PostgresFenceStore', 'PostgresIdempotencyStore', 'DefiniteFailure'],
    values: [],
  },
  'fencekeeper/s3': {
    functions: ['fencedPutObject', 'fencedDeleteObject', 'fencedGetObject', 'readFence', 'collectGarbage', 'isTombstone'],
    classes: [],
    values: ['DEFAULT_GRACE_MS', 'LAYOUT_METADATA', 'TOKEN_METADATA', 'TOMBSTONE_METADATA', 'WRITE_ID_METADATA'],
  },
  'fencekeeper/dynamodb': {
    functions: ['fencedPutItem', 'fencedUpdateItem', 'fencedDeleteItem', 'readFence', 'isTombstone'],
    classes: [],
    values: ['DEFAULT_TOKEN_ATTRIBUTE', 'DEFAULT_TOMBSTONE_ATTRIBUTE', 'DEFAULT_LOCK_ATTRIBUTE', 'MAX_ITEM_BYTES'],
  },
  'fencekeeper/express': {
    functions: ['fencing', 'fencedHandler', 'hasFencing', 'idempotency', 'keepRawBody', 'fencingHeaders', 'fencedFetch', 'verifyHolder'],
    classes: ['MemoryFenceStore', 'MemoryIdempotencyStore'],
    values: ['REPLAYED_HEADERS'],
  },
  'fencekeeper/fastify': {
    functions: ['fencing', 'idempotency', 'fencingHeaders', 'fencedFetch', 'verifyHolder'],
    classes: ['MemoryFenceStore', 'MemoryIdempotencyStore'],
    values: ['REPLAYED_HEADERS'],
  },
  'fencekeeper/fetch': {
    functions: ['withFencing', 'withIdempotency', 'fencingHeaders', 'fencedFetch', 'verifyHolder'],
    classes: ['MemoryFenceStore', 'MemoryIdempotencyStore'],
    values: ['REPLAYED_HEADERS'],
  },
  'fencekeeper/hono': {
    functions: ['fencing', 'idempotency', 'verifyHolder'],
    classes: ['MemoryFenceStore', 'MemoryIdempotencyStore'],
    values: ['REPLAYED_HEADERS'],
  },
  'fencekeeper/opentelemetry': { functions: ['instrument', 'uninstrument'], classes: [], values: ['ATTR', 'METRICS', 'SCOPE'] },
  'fencekeeper/redis': {
    functions: ['acquireLock', 'tryAcquireLock', 'lockStatus', 'redisSource', 'fencedSet', 'fencedGet', 'fencedDelete', 'readFence', 'bindFence'],
    classes: ['RedisFenceStore'],
    values: [],
  },
  'fencekeeper/mysql': {
    functions: [
      'migrate', 'loadMigrations', 'migrationsDirectory', 'withFence', 'fencedUpdate', 'fencedInsert', 'fencedUpsert', 'fencedDelete',
      'bindFence', 'fenceBindingOf', 'bindTable', 'tableBindingOf',
    ],
    classes: ['MySqlFenceStore'],
    values: [],
  },
  'fencekeeper/etcd': {
    functions: ['acquireLock', 'tryAcquireLock', 'lockStatus', 'observeLock', 'campaign', 'observeLeader', 'etcdSource', 'etcdSession', 'acquireReadLock', 'tryAcquireReadLock', 'acquireWriteLock', 'tryAcquireWriteLock', 'rwLockStatus', 'acquirePermit', 'tryAcquirePermit'],
    classes: ['EtcdSession'],
    values: [],
  },
  'fencekeeper/testing': {
    functions: ['startZooKeeper', 'startRedis', 'expireSession', 'sessionRecorder', 'spawnHolder', 'reportHolding', 'reportToTest', 'checkHistory', 'memorySource'],
    classes: ['TcpProxy', 'WriteHistory', 'ServerNotInstalledError', 'ServerStartError'],
    values: [],
  },
};

describe('the package by name', () => {
  it('package.json names the package and exports exactly its entry points', () => {
    expect(pkg.name).toBe('fencekeeper');
    expect(Object.keys(pkg.exports).sort()).toEqual(['.', './dynamodb', './etcd', './express', './extend', './fastify', './fetch', './hono', './mysql', './opentelemetry', './package.json', './postgres', './redis', './s3', './testing', './zookeeper']);
    for (const [subpath, target] of Object.entries(pkg.exports)) {
      if (typeof target === 'string') continue;
      expect(existsSync(join(root, target.default)), `${subpath} -> ${target.default}`).toBe(true);
      expect(existsSync(join(root, target.types)), `${subpath} -> ${target.types}`).toBe(true);
    }
  });

  it('the contract covers every entry point of the exports map', () => {
    const specifiers = Object.keys(pkg.exports).filter((subpath) => subpath !== './package.json').map((subpath) => (subpath === '.' ? pkg.name : `${pkg.name}/${subpath.slice(2)}`));
    expect(Object.keys(CONTRACT).sort()).toEqual(specifiers.sort());
  });

  it.each(Object.keys(CONTRACT))('%s exports exactly its contract names', async (specifier) => {
    const mod = await load(specifier);
    const { functions, classes, values } = CONTRACT[specifier]!;
    const listed = [...functions, ...classes, ...values];
    expect(new Set(listed).size, `${specifier}: a name listed twice`).toBe(listed.length);
    // An export missing from the contract shows up here by name.
    expect(Object.keys(mod).sort(), specifier).toEqual([...listed].sort());
    for (const name of values) expect(typeof mod[name], `${specifier}: ${name} is a value`).not.toBe('function');
    for (const name of functions) expect(typeof mod[name], `${specifier}: ${name}`).toBe('function');
    for (const name of classes) {
      expect(typeof mod[name], `${specifier}: ${name}`).toBe('function');
      expect(String(mod[name]).startsWith('class'), `${specifier}: ${name} is a class`).toBe(true);
    }
  });

  it('fencekeeper: tokens and errors work from the built files', async () => {
    const core = await load('fencekeeper');
    const parseToken = core.parseToken as (text: string) => bigint;
    const formatToken = core.formatToken as (token: bigint) => string;
    const InvalidTokenError = core.InvalidTokenError as new (message: string) => Error;
    expect(parseToken('9223372036854775807')).toBe(2n ** 63n - 1n);
    expect(formatToken(4294967303n)).toBe('4294967303');
    expect(() => parseToken('01')).toThrow(InvalidTokenError);
    expect(core.MAX_TOKEN).toBe(2n ** 63n - 1n);
  });

  it('errors from the built package and from the sources are one vocabulary', async () => {
    const core = await load('fencekeeper');
    const BuiltStale = core.StaleTokenError as typeof SourceStaleTokenError;
    expect(BuiltStale).not.toBe(SourceStaleTokenError); // two copies really
    const built = new BuiltStale('r', 1n, 2n);
    expect(built instanceof SourceStaleTokenError).toBe(true);
    expect(new SourceStaleTokenError('r', 1n, 2n) instanceof BuiltStale).toBe(true);
    expect(built.code).toBe('STALE_TOKEN');
  });

  it('fencekeeper: observers and holdings come from factories, so their classes are not exported', async () => {
    const core = await load('fencekeeper');
    for (const name of ['LockObserver', 'LeaderObserver', 'QueueObserver', 'Holding', 'HeldLock', 'HeldLeadership', 'LockHolder', 'QueueEntryInfo']) {
      expect(core[name], name).toBeUndefined();
    }
  });

  it('internal files are not reachable through the exports map', async () => {
    for (const specifier of ['fencekeeper/dist/src/token.js', 'fencekeeper/src/token.js', 'fencekeeper/sources/zookeeper', 'fencekeeper/dist/src/sources/zookeeper/client.js']) {
      await expect(load(specifier), specifier).rejects.toThrow();
    }
  });

  it('importing fencekeeper loads none of the adapters\' peer libraries', () => {
    // pg, kysely, @aws-sdk/client-s3, @aws-sdk/client-dynamodb and express are peers of their adapter
    // only. Follow the static imports from the core's entry
    // point through the built files and collect every bare specifier. (The
    // CLI may load pg lazily for `migrate`; it is not reachable from here.)
    const statement = /^\s*(?:import|export)\b[^'"]*?\bfrom\s*['"]([^'"]+)['"]|^\s*import\s*['"]([^'"]+)['"]/gm;
    const seen = new Set<string>();
    const bare = new Set<string>();
    const visit = (file: string): void => {
      if (seen.has(file)) return;
      seen.add(file);
      for (const match of readFileSync(file, 'utf8').matchAll(statement)) {
        const spec = (match[1] ?? match[2])!;
        if (spec.startsWith('.')) visit(join(dirname(file), spec));
        else if (!spec.startsWith('node:')) bare.add(`${file.slice(root.length)}: ${spec}`);
      }
    };
    visit(join(dist, 'src', 'index.js'));
    expect(seen.size).toBeGreaterThan(3);
    expect([...bare]).toEqual([]);
    // Nor the test kit: fencekeeper/testing is an entry of its own.
    expect([...seen].filter((file) => file.includes('/testing/'))).toEqual([]);
  });

  it.each(['fetch', 'hono'])('fencekeeper/%s (and its memory stores) load no framework at run time: no bare import but node:', (entry) => {
    const statement = /^\s*(?:import|export)\b[^'"]*?\bfrom\s*['"]([^'"]+)['"]|^\s*import\s*['"]([^'"]+)['"]/gm;
    const seen = new Set<string>();
    const bare = new Set<string>();
    const visit = (file: string): void => {
      if (seen.has(file)) return;
      seen.add(file);
      for (const match of readFileSync(file, 'utf8').matchAll(statement)) {
        const spec = (match[1] ?? match[2])!;
        if (spec.startsWith('.')) visit(join(dirname(file), spec));
        else if (!spec.startsWith('node:')) bare.add(`${file.slice(root.length)}: ${spec}`);
      }
    };
    visit(join(dist, 'adapters', entry, 'index.js'));
    expect([...seen].some((file) => file.endsWith('memory-fence-store.js'))).toBe(true);
    expect([...bare]).toEqual([]);
  });
});
