// The global setup's contract with the other test files: every server is
// named in the worker's environment and by inject(), and answers there.
import net from 'node:net';
import { describe, expect, inject, it } from 'vitest';
import { hasServer, SERVER_ENV, testServers } from '../../helpers/servers.js';
import { uniqueBucket, uniqueId, uniqueTable, uniqueZnodePath } from '../../helpers/unique.js';
import { fourLetterWord } from '../../helpers/zookeeper.js';

describe('test servers', () => {
  it('reach the worker through process.env and through inject()', () => {
    const injected = inject('fencekeeperServers');
    for (const key of ['zkStandalone', 'zkEnsemble', 'databaseUrl', 's3Endpoint'] as const) {
      expect(process.env[SERVER_ENV[key]], SERVER_ENV[key]).toBeTruthy();
      expect(injected[key]).toBe(process.env[SERVER_ENV[key]]);
    }
  });

  it('standalone ZooKeeper serves', async () => {
    const reply = await fourLetterWord(testServers().zkStandalone, 'srvr');
    expect(reply).toMatch(/^Mode: standalone$/m);
  });

  it('the ensemble has a leader and two followers', async () => {
    const modes = await Promise.all(
      testServers().zkEnsemble.split(',').map(async (hp) => /^Mode: (\w+)$/m.exec(await fourLetterWord(hp, 'srvr'))?.[1]),
    );
    expect(modes.sort()).toEqual(['follower', 'follower', 'leader']);
    expect(hasServer('zkEnsembleCtl')).toBe(true);
  });

  it('PostgreSQL accepts connections', async () => {
    const { default: pg } = await import('pg');
    const client = new pg.Client({ connectionString: testServers().databaseUrl });
    await client.connect();
    try {
      const { rows } = await client.query<{ db: string }>('select current_database() as db');
      expect(rows[0]?.db).toBeTruthy();
    } finally {
      await client.end();
    }
  });

  it('S3 answers a signed request from the test user', async () => {
    const { S3Client, CreateBucketCommand, DeleteBucketCommand } = await import('@aws-sdk/client-s3');
    const { endpoint, region, credentials } = testServers().s3;
    const s3 = new S3Client({ endpoint, region, credentials, forcePathStyle: true, maxAttempts: 1 });
    const Bucket = uniqueBucket('probe');
    await s3.send(new CreateBucketCommand({ Bucket }));
    await s3.send(new DeleteBucketCommand({ Bucket }));
    s3.destroy();
  });

  it('the DynamoDB-API server (dynalite, FK_DYNAMODB) answers ListTables', async () => {
    const { DynamoDBClient, ListTablesCommand } = await import('@aws-sdk/client-dynamodb');
    const dynamodb = new DynamoDBClient({ endpoint: testServers().dynamodb, region: 'us-east-1', credentials: { accessKeyId: 'test', secretAccessKey: 'test' }, maxAttempts: 1 });
    try {
      expect(Array.isArray((await dynamodb.send(new ListTablesCommand({}))).TableNames)).toBe(true);
    } finally {
      dynamodb.destroy();
    }
  });
});

describe('a script outside vitest (scriptServers)', () => {
  it('reads the same servers from the environment, and names the variable of one that is missing', async () => {
    const { scriptServers } = await import('../../faults/script-servers.js');
    expect(scriptServers().zkEnsemble).toBe(testServers().zkEnsemble);
    expect(scriptServers().s3).toEqual(testServers().s3);
    const saved = process.env[SERVER_ENV.s3Endpoint];
    delete process.env[SERVER_ENV.s3Endpoint];
    try {
      // no guessed 127.0.0.1 address: an error naming what to set
      expect(() => scriptServers().s3).toThrow(/^S3_ENDPOINT is not set/);
      expect(scriptServers().databaseUrl).toBe(testServers().databaseUrl); // the others still read
    } finally {
      process.env[SERVER_ENV.s3Endpoint] = saved;
    }
  });
});

describe('unique names', () => {
  it('are valid identifiers, bucket names and znode paths, and differ', () => {
    const ids = new Set(Array.from({ length: 1000 }, () => uniqueId('My Test!')));
    expect(ids.size).toBe(1000);
    for (const id of ids) expect(id).toMatch(/^my_test_[0-9a-f]{12}$/);
    expect(uniqueTable('9lives')).toMatch(/^t9lives_[0-9a-f]{12}$/);
    expect(uniqueBucket()).toMatch(/^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$/);
    expect(uniqueZnodePath('lock')).toMatch(/^\/fencekeeper-test\/lock_[0-9a-f]{12}$/);
  });
});
