// fencekeeper/dynamodb's lock binding against dynalite: an item bound to a
// lock takes only that lock's sequencers (adapters/dynamodb/binding.ts).
import { PutItemCommand, type DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CHANNELS, CorruptFenceError, InvalidArgumentError, SequencerMismatchError, StaleTokenError, sequencer, type FenceRefusedMessage } from '../../../src/index.js';
import { fencedDeleteItem, fencedPutItem, fencedUpdateItem, readFence } from '../../../adapters/dynamodb/index.js';
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { uniqueId } from '../../helpers/unique.js';
import { createTable, dropTable, expectRejects, getItem, newClient } from './helpers.js';

let client: DynamoDBClient;
let TableName: string;
beforeAll(async () => {
  client = newClient();
  TableName = await createTable(client, 'bound');
});
afterAll(async () => {
  await dropTable(client, TableName);
  client.destroy();
});

const source = { kind: 'zookeeper', id: 'ensemble-a' };
const jobs = (token: bigint) => sequencer({ kind: 'lock', name: 'jobs/index', source, token });
const other = (token: bigint) => sequencer({ kind: 'lock', name: 'jobs/other', source, token });
const elsewhere = (token: bigint) => sequencer({ kind: 'lock', name: 'jobs/index', source: { kind: 'zookeeper', id: 'ensemble-b' }, token });
const bind = { kind: 'lock' as const, lock: 'jobs/index', source };
const key = (pk: string) => ({ pk: { S: pk } });

describe('a bound item', () => {
  it('refuses another lock\'s sequencer, another source\'s and a bare token, even larger ones; takes its own lock\'s through put, update and delete, keeping the binding', async () => {
    const pk = uniqueId('bound');
    await fencedPutItem(client, { TableName, Item: { pk: { S: pk }, v: { S: 'a' } }, token: jobs(5n) }, { bind });
    expect((await getItem(client, TableName, pk))?.fencing_lock).toEqual({ S: 'fk1:lock:zookeeper:ensemble-a:jobs%2Findex' });

    const refused: FenceRefusedMessage[] = [];
    const listener = (message: unknown) => refused.push(message as FenceRefusedMessage);
    subscribe(CHANNELS.fenceRefused, listener);
    try {
      // Larger and smaller tokens alike: another lock's tokens are not comparable, so never "stale".
      for (const fencing of [other(100n), elsewhere(100n), 100n, other(1n), 1n]) {
        const put = await expectRejects(fencedPutItem(client, { TableName, Item: { pk: { S: pk }, v: { S: 'x' } }, token: fencing }), SequencerMismatchError);
        expect(put.code).toBe('SEQUENCER_MISMATCH');
        expect(put.bound).toEqual(bind);
        await expectRejects(fencedUpdateItem(client, { TableName, Key: key(pk), token: fencing, UpdateExpression: 'SET v = :v', ExpressionAttributeValues: { ':v': { S: 'x' } } }), SequencerMismatchError);
        await expectRejects(fencedDeleteItem(client, { TableName, Key: key(pk), token: fencing }), SequencerMismatchError);
      }
    } finally {
      unsubscribe(CHANNELS.fenceRefused, listener);
    }
    expect(refused.map((m) => m.code)).toEqual(Array(15).fill('SEQUENCER_MISMATCH'));
    expect(await getItem(client, TableName, pk)).toEqual({ pk: { S: pk }, v: { S: 'a' }, fencing_token: { N: '5' }, fencing_lock: { S: 'fk1:lock:zookeeper:ensemble-a:jobs%2Findex' } });

    // Its own lock: a put without `bind` keeps the binding (the second round carries it).
    await fencedPutItem(client, { TableName, Item: { pk: { S: pk }, v: { S: 'b' } }, token: jobs(6n) });
    await fencedUpdateItem(client, { TableName, Key: key(pk), token: jobs(7n), UpdateExpression: 'SET v = :v', ExpressionAttributeValues: { ':v': { S: 'c' } } });
    expect(await getItem(client, TableName, pk)).toEqual({ pk: { S: pk }, v: { S: 'c' }, fencing_token: { N: '7' }, fencing_lock: { S: 'fk1:lock:zookeeper:ensemble-a:jobs%2Findex' } });
    await expectRejects(fencedPutItem(client, { TableName, Item: { pk: { S: pk } }, token: jobs(6n) }), StaleTokenError);
    await fencedDeleteItem(client, { TableName, Key: key(pk), token: jobs(8n) });
    // The tombstone stays bound.
    expect(await getItem(client, TableName, pk)).toEqual({ pk: { S: pk }, fencing_token: { N: '8' }, fencing_deleted: { BOOL: true }, fencing_lock: { S: 'fk1:lock:zookeeper:ensemble-a:jobs%2Findex' } });
    await expectRejects(fencedPutItem(client, { TableName, Item: { pk: { S: pk } }, token: other(9n) }), SequencerMismatchError);
    // A binding is never replaced: binding to another lock needs that lock's sequencer, which the item refuses.
    await expectRejects(fencedPutItem(client, { TableName, Item: { pk: { S: pk } }, token: other(9n) }, { bind: { kind: 'lock', lock: 'jobs/other', source } }), SequencerMismatchError);
    expect(await readFence(client, { TableName, Key: key(pk) })).toBe(8n);
  });

  it('an unbound item takes bare tokens and any lock\'s sequencers, and a write without bind does not bind it', async () => {
    const pk = uniqueId('unbound');
    await fencedPutItem(client, { TableName, Item: { pk: { S: pk } }, token: 3n });
    await fencedPutItem(client, { TableName, Item: { pk: { S: pk } }, token: other(4n) });
    await fencedUpdateItem(client, { TableName, Key: key(pk), token: jobs(5n) });
    await fencedDeleteItem(client, { TableName, Key: key(pk), token: 6n });
    const item = await getItem(client, TableName, pk);
    expect(item?.fencing_lock).toBeUndefined();
    // Binding with an update.
    await fencedUpdateItem(client, { TableName, Key: key(pk), token: jobs(7n) }, { bind });
    expect((await getItem(client, TableName, pk))?.fencing_lock?.S).toBe('fk1:lock:zookeeper:ensemble-a:jobs%2Findex');
    await expectRejects(fencedUpdateItem(client, { TableName, Key: key(pk), token: 100n }), SequencerMismatchError);
  });

  it('bind needs a sequencer of that lock; a binding that does not parse is a CorruptFenceError', async () => {
    const pk = uniqueId('bindarg');
    await expectRejects(fencedPutItem(client, { TableName, Item: { pk: { S: pk } }, token: 3n }, { bind }), InvalidArgumentError);
    await expectRejects(fencedPutItem(client, { TableName, Item: { pk: { S: pk } }, token: other(3n) }, { bind }), InvalidArgumentError);
    await expectRejects(fencedPutItem(client, { TableName, Item: { pk: { S: pk }, fencing_lock: { S: 'x' } }, token: jobs(3n) }), InvalidArgumentError);
    expect(await getItem(client, TableName, pk)).toBeUndefined();
    await client.send(new PutItemCommand({ TableName, Item: { pk: { S: pk }, fencing_token: { N: '2' }, fencing_lock: { S: 'not a binding' } } }));
    await expectRejects(fencedPutItem(client, { TableName, Item: { pk: { S: pk } }, token: jobs(3n) }), CorruptFenceError);
    await expectRejects(fencedUpdateItem(client, { TableName, Key: key(pk), token: 3n }), CorruptFenceError);
  });
});
