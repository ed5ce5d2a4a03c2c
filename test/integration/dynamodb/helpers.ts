// What the fencekeeper/dynamodb tests share: a client of the test server
// (dynalite, FK_DYNAMODB) and tables of their own, one per file, named
// uniquely so files and runs side by side never meet; removed in afterAll.
import { CreateTableCommand, DeleteTableCommand, DynamoDBClient, GetItemCommand, type AttributeValue } from '@aws-sdk/client-dynamodb';
import { expect } from 'vitest';
import { testServers } from '../../helpers/servers.js';
import { uniqueId } from '../../helpers/unique.js';

export function newClient(): DynamoDBClient {
  return new DynamoDBClient({
    endpoint: testServers().dynamodb,
    region: 'us-east-1',
    // dynalite checks that requests are signed, not by whom.
    credentials: { accessKeyId: 'test', secretAccessKey: 'test' },
    maxAttempts: 1,
  });
}

/** A table with a string hash key `pk` (PAY_PER_REQUEST); dynalite.sh starts it with createTableMs 0, so ACTIVE at once. */
export async function createTable(client: DynamoDBClient, prefix: string): Promise<string> {
  const TableName = uniqueId(prefix);
  await client.send(new CreateTableCommand({
    TableName,
    KeySchema: [{ AttributeName: 'pk', KeyType: 'HASH' }],
    AttributeDefinitions: [{ AttributeName: 'pk', AttributeType: 'S' }],
    BillingMode: 'PAY_PER_REQUEST',
  }));
  return TableName;
}

export async function dropTable(client: DynamoDBClient, TableName: string): Promise<void> {
  await client.send(new DeleteTableCommand({ TableName })).catch(() => undefined);
}

export async function getItem(client: DynamoDBClient, TableName: string, pk: string): Promise<Record<string, AttributeValue> | undefined> {
  return (await client.send(new GetItemCommand({ TableName, Key: { pk: { S: pk } }, ConsistentRead: true }))).Item;
}

export async function expectRejects<E>(promise: Promise<unknown>, type: abstract new (...args: never[]) => E): Promise<E> {
  const error = await promise.then(
    () => { throw new Error('expected a rejection'); },
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(type);
  return error as E;
}
