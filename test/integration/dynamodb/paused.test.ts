// The paused holder against fencekeeper/dynamodb, end to end: a holder
// process (test/fixtures/dynamodb-holder.mjs, the built package) takes a
// ZooKeeper lock, is SIGSTOPped, and stays stopped while its session expires
// and the next holder acquires and writes the item. After SIGCONT, the
// holder's first check reads held === false, and its write with the old
// token is refused (STALE_TOKEN): the item keeps the next holder's write.
import { fileURLToPath } from 'node:url';
import type { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { fencedPutItem, readFence } from '../../../adapters/dynamodb/index.js';
import type { HolderProcess } from '../../../src/testing/index.js';
import { pauseSourceHolder } from '../../helpers/paused-source-holder.js';
import { testServers } from '../../helpers/servers.js';
import { SOURCES } from '../../helpers/sources.js';
import { uniqueId, uniqueLockName } from '../../helpers/unique.js';
import { createTable, dropTable, getItem, newClient } from './helpers.js';

const FIXTURE = fileURLToPath(new URL('../../fixtures/dynamodb-holder.mjs', import.meta.url));
const zookeeper = SOURCES.find((s) => s.kind === 'zookeeper')!;
const holders: HolderProcess[] = [];
let client: DynamoDBClient;
let TableName: string;

beforeAll(async () => {
  client = newClient();
  TableName = await createTable(client, 'paused');
});
afterAll(async () => {
  await Promise.all(holders.map((h) => h.stop()));
  await dropTable(client, TableName);
  client.destroy();
}, 60_000);

it('a holder stopped past its ZooKeeper session: held === false at its first check, its old token refused after the next holder\'s write', async () => {
  const lock = uniqueLockName('paused_dynamodb');
  const pk = uniqueId('item');
  const run = await pauseSourceHolder(zookeeper, {
    lock,
    fixture: FIXTURE,
    holders,
    env: { FK_DYNAMODB: testServers().dynamodb, FK_DYNAMODB_TABLE: TableName, FK_DYNAMODB_KEY: pk },
    async whileStopped(next) {
      await fencedPutItem(client, { TableName, Item: { pk: { S: pk }, writer: { S: 'next holder' } }, token: next.token });
    },
  });
  const report = run.report as unknown as { held: boolean; aborted: boolean; token: bigint; dynamodb: string };
  expect(run.stoppedAtGrant).toBe(true);
  expect(run.nextToken > run.oldToken, `successor ${run.nextToken} after ${run.oldToken}`).toBe(true);
  expect(report.token).toBe(run.oldToken);
  expect(report.held).toBe(false);
  expect(report.aborted).toBe(true);
  expect(report.dynamodb).toBe('STALE_TOKEN');
  expect(await readFence(client, { TableName, Key: { pk: { S: pk } } })).toBe(run.nextToken);
  expect((await getItem(client, TableName, pk))?.writer?.S).toBe('next holder');
}, 180_000);
