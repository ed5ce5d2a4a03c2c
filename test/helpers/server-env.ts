// The names under which the global setup publishes the test servers, and
// the shape test files and scripts read them in. Kept apart from servers.ts
// because the global setup and plain scripts run outside a vitest worker and
// must not import 'vitest'.

/** What the global setup hands to the test workers (JSON-serialisable). */
export interface ProvidedServers {
  readonly zkStandalone?: string;
  readonly zkEnsemble?: string;
  readonly zkEnsembleCtl?: string;
  readonly zkStandaloneTls?: string;
  readonly zkEnsembleTls?: string;
  readonly zkTlsCa?: string;
  readonly databaseUrl?: string;
  readonly s3Endpoint?: string;
  readonly s3Region?: string;
  readonly s3AccessKey?: string;
  readonly s3SecretKey?: string;
  readonly redis?: string;
  readonly redlock?: string;
  readonly redisPair?: string;
  readonly redisCtl?: string;
  readonly etcd?: string;
  readonly etcdCluster?: string;
  readonly etcdCtl?: string;
  readonly dynamodb?: string;
  readonly mysql?: string;
}

// Types only: erased at run time, so this file still imports nothing.
declare module 'vitest' {
  export interface ProvidedContext {
    fencekeeperServers: ProvidedServers;
  }
}

/** The environment variable for each server, in one place. */
export const SERVER_ENV = {
  zkStandalone: 'FK_ZK_STANDALONE',
  zkEnsemble: 'FK_ZK_ENSEMBLE',
  zkEnsembleCtl: 'FK_ZK_ENSEMBLE_CTL',
  zkStandaloneTls: 'FK_ZK_STANDALONE_TLS',
  zkEnsembleTls: 'FK_ZK_ENSEMBLE_TLS',
  zkTlsCa: 'FK_ZK_TLS_CA',
  databaseUrl: 'DATABASE_URL',
  s3Endpoint: 'S3_ENDPOINT',
  s3Region: 'S3_REGION',
  s3AccessKey: 'S3_ACCESS_KEY',
  s3SecretKey: 'S3_SECRET_KEY',
  redis: 'FK_REDIS',
  redlock: 'FK_REDLOCK',
  redisPair: 'FK_REDIS_PAIR',
  redisCtl: 'FK_REDIS_CTL',
  etcd: 'FK_ETCD',
  etcdCluster: 'FK_ETCD_CLUSTER',
  etcdCtl: 'FK_ETCD_CTL',
  dynamodb: 'FK_DYNAMODB',
  mysql: 'FK_MYSQL',
} as const satisfies Record<keyof ProvidedServers, string>;

/**
 * The only values with a fallback: the S3 region and the credentials of the
 * user test/servers/rgw.sh creates (it prints them too). Addresses have none:
 * a server the run did not provide is an error, never a guessed 127.0.0.1 port.
 */
export const SERVER_DEFAULTS: Readonly<Partial<Record<keyof ProvidedServers, string>>> = {
  s3Region: 'us-east-1',
  s3AccessKey: 'test',
  s3SecretKey: 'testsecret',
};

/** Where the servers of a run are, as test files and scripts use them. */
export interface TestServers {
  /** 'host:port' of the standalone ZooKeeper (FK_ZK_STANDALONE). */
  readonly zkStandalone: string;
  /** 'h1:p1,h2:p2,h3:p3' of the 3-node ensemble (FK_ZK_ENSEMBLE). */
  readonly zkEnsemble: string;
  /** 'host:port' of the standalone's secure client port (FK_ZK_STANDALONE_TLS). */
  readonly zkStandaloneTls: string;
  /** The ensemble's secure client ports, 'h1:p1,h2:p2,h3:p3' (FK_ZK_ENSEMBLE_TLS). */
  readonly zkEnsembleTls: string;
  /** Path of the PEM CA both secure ports' certificates chain to (FK_ZK_TLS_CA). */
  readonly zkTlsCa: string;
  /** postgres:// URL of a database tests may create tables in (DATABASE_URL). */
  readonly databaseUrl: string;
  readonly s3: {
    readonly endpoint: string;
    readonly region: string;
    readonly credentials: { readonly accessKeyId: string; readonly secretAccessKey: string };
  };
  /** redis:// URL of the single Redis instance for the single-instance lock (FK_REDIS). */
  readonly redis: string;
  /** redis:// URLs of the five independent Redlock nodes (FK_REDLOCK, comma-separated). */
  readonly redlock: readonly string[];
  /** redis:// URLs of the primary and its asynchronous replica (FK_REDIS_PAIR). */
  readonly redisPair: readonly [primary: string, replica: string];
  /** http:// URL of the single etcd node (FK_ETCD). */
  readonly etcd: string;
  /** http:// URLs of the 3-node etcd cluster (FK_ETCD_CLUSTER, comma-separated). */
  readonly etcdCluster: readonly string[];
  /** http:// endpoint of the DynamoDB-API server, dynalite (FK_DYNAMODB). */
  readonly dynamodb: string;
  /** mysql:// URL of a MariaDB (or MySQL) database tests may create tables in (FK_MYSQL). */
  readonly mysql: string;
}

/** TestServers whose every field calls `read` when accessed (so only the servers used must exist). */
export function serversReadBy(read: (key: keyof ProvidedServers) => string): TestServers {
  return {
    get zkStandalone() { return read('zkStandalone'); },
    get zkEnsemble() { return read('zkEnsemble'); },
    get zkStandaloneTls() { return read('zkStandaloneTls'); },
    get zkEnsembleTls() { return read('zkEnsembleTls'); },
    get zkTlsCa() { return read('zkTlsCa'); },
    get databaseUrl() { return read('databaseUrl'); },
    get s3() {
      return {
        endpoint: read('s3Endpoint'),
        region: read('s3Region'),
        credentials: { accessKeyId: read('s3AccessKey'), secretAccessKey: read('s3SecretKey') },
      };
    },
    get redis() { return read('redis'); },
    get redlock() { return read('redlock').split(','); },
    get redisPair() {
      const [primary, replica] = read('redisPair').split(',');
      if (primary === undefined || replica === undefined) throw new Error(`${SERVER_ENV.redisPair} must name a primary and a replica`);
      return [primary, replica] as const;
    },
    get etcd() { return read('etcd'); },
    get etcdCluster() { return read('etcdCluster').split(','); },
    get dynamodb() { return read('dynamodb'); },
    get mysql() { return read('mysql'); },
  };
}

/**
 * The servers named by the environment alone (no vitest inject): for modules
 * that scripts load too, such as test/helpers/sources.ts. Inside a vitest
 * worker the global setup has put every address in the environment already.
 */
export function environmentServers(): TestServers {
  return serversReadBy((key) => {
    const value = process.env[SERVER_ENV[key]];
    if (value !== undefined && value !== '') return value;
    const fallback = SERVER_DEFAULTS[key];
    if (fallback !== undefined) return fallback;
    throw new Error(`${SERVER_ENV[key]} is not set (and the global setup did not start that server)`);
  });
}
