// fencekeeper/dynamodb against a DynamoDB-API server (dynalite 4, FK_DYNAMODB):
// the token compared and stored by the write's own condition. dynalite
// ignores ReturnValuesOnConditionCheckFailure, so every refusal here is
// classified by the consistent read (the returned-item path is unit-tested:
// test/unit/dynamodb-refusal.test.ts).
import { randomInt } from 'node:crypto';
import { ConditionalCheckFailedException, PutItemCommand, type DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CorruptFenceError, InvalidArgumentError, InvalidTokenError, MAX_TOKEN, StaleTokenError, sequencer } from '../../../src/index.js';
import { fencedDeleteItem, fencedPutItem, fencedUpdateItem, isTombstone, readFence } from '../../../adapters/dynamodb/index.js';
import { createTable, dropTable, expectRejects, getItem, newClient } from './helpers.js';
import { uniqueId } from '../../helpers/unique.js';

let client: DynamoDBClient;
let TableName: string;

beforeAll(async () => {
  client = newClient();
  TableName = await createTable(client, 'fenced');
});
afterAll(async () => {
  await dropTable(client, TableName);
  client.destroy();
});

const key = (pk: string) => ({ pk: { S: pk } });
const token = (item: Awaited<ReturnType<typeof getItem>>) => item?.fencing_token?.N;

describe('racing writers', () => {
  it('20 writers with random tokens, 10 rounds: the mark is the largest acknowledged token and the item is that writer\'s; refused writes leave no trace', async () => {
    let refusedTotal = 0;
    for (let round = 0; round < 10; round++) {
      const pk = uniqueId(`race${round}`);
      // Distinct random tokens across the whole range, the largest near 2^63 in some rounds.
      const tokens = new Set<bigint>();
      while (tokens.size < 20) tokens.add(round % 3 === 2 ? MAX_TOKEN - BigInt(randomInt(0, 1_000_000)) : BigInt(randomInt(1, 1_000_000)));
      const writers = [...tokens].map((t, i) => ({ writer: `w${i}`, token: t }));
      // Half the rounds put whole items, half update one attribute; a delete in the middle of some.
      const useUpdate = round % 2 === 1;
      const outcomes = await Promise.all(writers.map(async ({ writer, token: t }) => {
        try {
          if (useUpdate) {
            await fencedUpdateItem(client, {
              TableName, Key: key(pk), token: t,
              UpdateExpression: 'SET #w = :w', ExpressionAttributeNames: { '#w': 'writer' }, ExpressionAttributeValues: { ':w': { S: writer } },
            });
          } else {
            await fencedPutItem(client, { TableName, Item: { pk: { S: pk }, writer: { S: writer } }, token: t });
          }
          return { writer, token: t, ok: true as const };
        } catch (error) {
          expect(error).toBeInstanceOf(StaleTokenError);
          const stale = error as StaleTokenError;
          expect(stale.presented).toBe(t);
          expect(stale.current !== null && stale.current > t, `refusal of ${t} reports current ${stale.current}`).toBe(true);
          return { writer, token: t, ok: false as const };
        }
      }));
      const acknowledged = outcomes.filter((o) => o.ok);
      const largest = acknowledged.reduce((a, b) => (b.token > a.token ? b : a));
      // The largest token of all can never be refused.
      expect(largest.token).toBe([...tokens].reduce((a, b) => (b > a ? b : a)));
      expect(await readFence(client, { TableName, Key: key(pk) })).toBe(largest.token);
      const item = await getItem(client, TableName, pk);
      expect(item?.writer?.S, `round ${round}`).toBe(largest.writer);
      expect(token(item)).toBe(String(largest.token));
      expect(item?.fencing_deleted).toBeUndefined();
      // A refused writer never shows up, even afterwards: a stale retry is refused again.
      const refused = outcomes.filter((o) => !o.ok);
      refusedTotal += refused.length;
      for (const r of refused.slice(0, 3)) {
        await expectRejects(fencedPutItem(client, { TableName, Item: { pk: { S: pk }, writer: { S: r.writer } }, token: r.token }), StaleTokenError);
      }
      expect((await getItem(client, TableName, pk))?.writer?.S).toBe(largest.writer);
    }
    // The writers did race: some were refused (20 at once, in any order).
    expect(refusedTotal).toBeGreaterThan(0);
  }, 120_000);
});

describe('the token compare', () => {
  it('equal tokens pass, larger ones advance, smaller ones are refused with the current token', async () => {
    const pk = uniqueId('equal');
    await fencedPutItem(client, { TableName, Item: { pk: { S: pk }, v: { S: 'a' } }, token: 7n });
    await fencedPutItem(client, { TableName, Item: { pk: { S: pk }, v: { S: 'b' } }, token: 7n });
    expect((await getItem(client, TableName, pk))?.v?.S).toBe('b');
    await fencedUpdateItem(client, { TableName, Key: key(pk), token: 7n, UpdateExpression: 'SET v = :v', ExpressionAttributeValues: { ':v': { S: 'c' } } });
    expect((await getItem(client, TableName, pk))?.v?.S).toBe('c');
    await fencedUpdateItem(client, { TableName, Key: key(pk), token: 9n });
    expect(await readFence(client, { TableName, Key: key(pk) })).toBe(9n);
    const stale = await expectRejects(fencedPutItem(client, { TableName, Item: { pk: { S: pk }, v: { S: 'old' } }, token: 8n }), StaleTokenError);
    expect(stale.code).toBe('STALE_TOKEN');
    expect(stale.current).toBe(9n);
    expect(stale.presented).toBe(8n);
    expect(await getItem(client, TableName, pk)).toEqual({ pk: { S: pk }, v: { S: 'c' }, fencing_token: { N: '9' } });
  });

  it('takes a sequencer where a token goes (the core\'s resolveFencing)', async () => {
    const pk = uniqueId('seq');
    const lock = (t: bigint) => sequencer({ kind: 'lock', name: 'jobs', source: { kind: 'zookeeper', id: 'z1' }, token: t });
    await fencedPutItem(client, { TableName, Item: { pk: { S: pk } }, token: lock(12n) });
    expect(await readFence(client, { TableName, Key: key(pk) })).toBe(12n);
    await expectRejects(fencedDeleteItem(client, { TableName, Key: key(pk), token: lock(11n) }), StaleTokenError);
  });

  it('ReturnValues ALL_OLD returns the replaced item', async () => {
    const pk = uniqueId('old');
    await fencedPutItem(client, { TableName, Item: { pk: { S: pk }, v: { S: 'a' } }, token: 3n });
    const result = await fencedPutItem(client, { TableName, Item: { pk: { S: pk }, v: { S: 'b' } }, token: 4n, ReturnValues: 'ALL_OLD' });
    expect(result).toEqual({ token: 4n, Attributes: { pk: { S: pk }, v: { S: 'a' }, fencing_token: { N: '3' } } });
  });

  it('a custom token attribute', async () => {
    const pk = uniqueId('custom');
    const options = { tokenAttribute: 'epoch', tombstoneAttribute: 'gone' };
    await fencedPutItem(client, { TableName, Item: { pk: { S: pk } }, token: 5n }, options);
    await fencedDeleteItem(client, { TableName, Key: key(pk), token: 6n }, options);
    expect(await getItem(client, TableName, pk)).toEqual({ pk: { S: pk }, epoch: { N: '6' }, gone: { BOOL: true } });
    expect(await readFence(client, { TableName, Key: key(pk) }, options)).toBe(6n);
    await expectRejects(fencedPutItem(client, { TableName, Item: { pk: { S: pk } }, token: 5n }, options), StaleTokenError);
  });
});

describe('deletes keep the fence', () => {
  it('a tombstone carries the token: GetItem returns it, readFence reports its token, a stale re-insert or update is refused', async () => {
    const pk = uniqueId('del');
    await fencedPutItem(client, { TableName, Item: { pk: { S: pk }, v: { S: 'a' } }, token: 5n });
    await fencedDeleteItem(client, { TableName, Key: key(pk), token: 6n });
    const tombstone = await getItem(client, TableName, pk);
    expect(tombstone).toEqual({ pk: { S: pk }, fencing_token: { N: '6' }, fencing_deleted: { BOOL: true } });
    expect(isTombstone(tombstone)).toBe(true);
    expect(await readFence(client, { TableName, Key: key(pk) })).toBe(6n);

    const reinsert = await expectRejects(fencedPutItem(client, { TableName, Item: { pk: { S: pk }, v: { S: 'stale' } }, token: 5n }), StaleTokenError);
    expect(reinsert.current).toBe(6n);
    await expectRejects(fencedUpdateItem(client, { TableName, Key: key(pk), token: 5n, UpdateExpression: 'SET v = :v', ExpressionAttributeValues: { ':v': { S: 'stale' } } }), StaleTokenError);
    await expectRejects(fencedDeleteItem(client, { TableName, Key: key(pk), token: 4n }), StaleTokenError);
    expect(await getItem(client, TableName, pk)).toEqual(tombstone);

    // An equal token writes the item again: a plain item, the mark kept.
    await fencedPutItem(client, { TableName, Item: { pk: { S: pk }, v: { S: 'again' } }, token: 6n });
    const again = await getItem(client, TableName, pk);
    expect(again).toEqual({ pk: { S: pk }, v: { S: 'again' }, fencing_token: { N: '6' } });
    expect(isTombstone(again)).toBe(false);
  });

  it('deleting a missing item leaves a tombstone; an update revives a tombstone (mustExist refuses to)', async () => {
    const pk = uniqueId('delmissing');
    await fencedDeleteItem(client, { TableName, Key: key(pk), token: 10n });
    expect(await readFence(client, { TableName, Key: key(pk) })).toBe(10n);
    await expectRejects(fencedUpdateItem(client, { TableName, Key: key(pk), token: 10n, UpdateExpression: 'SET v = :v', ExpressionAttributeValues: { ':v': { S: 'x' } } }, { mustExist: true }), ConditionalCheckFailedException);
    expect(isTombstone(await getItem(client, TableName, pk))).toBe(true);
    await fencedUpdateItem(client, { TableName, Key: key(pk), token: 11n, UpdateExpression: 'SET v = :v', ExpressionAttributeValues: { ':v': { S: 'x' } } });
    expect(await getItem(client, TableName, pk)).toEqual({ pk: { S: pk }, v: { S: 'x' }, fencing_token: { N: '11' } });
    await fencedUpdateItem(client, { TableName, Key: key(pk), token: 11n, UpdateExpression: 'SET v = :v', ExpressionAttributeValues: { ':v': { S: 'y' } } }, { mustExist: true });
    expect((await getItem(client, TableName, pk))?.v?.S).toBe('y');
    await expectRejects(fencedUpdateItem(client, { TableName, Key: key(uniqueId('nothing')), token: 1n }, { mustExist: true }), ConditionalCheckFailedException);
  });
});

describe('your own expressions', () => {
  it('your condition is ANDed with the fence\'s: its failure passes through as ConditionalCheckFailedException, a stale token is still StaleTokenError', async () => {
    const pk = uniqueId('cond');
    await fencedPutItem(client, { TableName, Item: { pk: { S: pk }, state: { S: 'open' } }, token: 5n });
    const onlyIfClosed = { ConditionExpression: '#s = :closed', ExpressionAttributeNames: { '#s': 'state' }, ExpressionAttributeValues: { ':closed': { S: 'closed' } } };
    // Token fine, condition false.
    await expectRejects(fencedPutItem(client, { TableName, Item: { pk: { S: pk }, state: { S: 'x' } }, token: 6n, ...onlyIfClosed }), ConditionalCheckFailedException);
    // Token stale, condition true.
    const onlyIfOpen = { ConditionExpression: '#s = :open', ExpressionAttributeNames: { '#s': 'state' }, ExpressionAttributeValues: { ':open': { S: 'open' } } };
    await expectRejects(fencedPutItem(client, { TableName, Item: { pk: { S: pk }, state: { S: 'x' } }, token: 4n, ...onlyIfOpen }), StaleTokenError);
    expect(await getItem(client, TableName, pk)).toEqual({ pk: { S: pk }, state: { S: 'open' }, fencing_token: { N: '5' } });
    // Both true.
    await fencedPutItem(client, { TableName, Item: { pk: { S: pk }, state: { S: 'closed' } }, token: 6n, ...onlyIfOpen });
    expect(await getItem(client, TableName, pk)).toEqual({ pk: { S: pk }, state: { S: 'closed' }, fencing_token: { N: '6' } });
    // On a delete too.
    await expectRejects(fencedDeleteItem(client, { TableName, Key: key(pk), token: 7n, ...onlyIfOpen }), ConditionalCheckFailedException);
    await fencedDeleteItem(client, { TableName, Key: key(pk), token: 7n, ...onlyIfClosed });
    expect(await readFence(client, { TableName, Key: key(pk) })).toBe(7n);
  });

  it('your UpdateExpression\'s SET, REMOVE and ADD clauses keep working beside the fence\'s SET and REMOVE', async () => {
    const pk = uniqueId('upd');
    await fencedPutItem(client, { TableName, Item: { pk: { S: pk }, a: { S: 'a' }, gone: { S: 'x' }, n: { N: '1' } }, token: 2n });
    await fencedUpdateItem(client, {
      TableName, Key: key(pk), token: 3n,
      UpdateExpression: 'add n :one remove gone set a = :a, b = :b',
      ExpressionAttributeValues: { ':one': { N: '1' }, ':a': { S: 'A' }, ':b': { S: 'B' } },
    });
    expect(await getItem(client, TableName, pk)).toEqual({ pk: { S: pk }, a: { S: 'A' }, b: { S: 'B' }, n: { N: '2' }, fencing_token: { N: '3' } });
  });

  it('the fence\'s placeholders and attributes are reserved: refused with INVALID_ARGUMENT, nothing written', async () => {
    const pk = uniqueId('reserved');
    await fencedPutItem(client, { TableName, Item: { pk: { S: pk }, v: { S: 'a' } }, token: 2n });
    const before = await getItem(client, TableName, pk);
    const attempts: Promise<unknown>[] = [
      fencedUpdateItem(client, { TableName, Key: key(pk), token: 3n, UpdateExpression: 'SET #fk_v = :v', ExpressionAttributeNames: { '#fk_v': 'v' }, ExpressionAttributeValues: { ':v': { S: 'b' } } }),
      fencedUpdateItem(client, { TableName, Key: key(pk), token: 3n, UpdateExpression: 'SET v = :fk_v', ExpressionAttributeValues: { ':fk_v': { S: 'b' } } }),
      // The fence's own placeholders, named without declaring them: they would resolve to the fence's.
      fencedUpdateItem(client, { TableName, Key: key(pk), token: 3n, UpdateExpression: 'SET v = :fk_t' }),
      fencedPutItem(client, { TableName, Item: { pk: { S: pk } }, token: 3n, ConditionExpression: 'attribute_exists(#fk_t)' }),
      fencedUpdateItem(client, { TableName, Key: key(pk), token: 3n, UpdateExpression: 'SET #t = :v', ExpressionAttributeNames: { '#t': 'fencing_token' }, ExpressionAttributeValues: { ':v': { N: '99' } } }),
      fencedUpdateItem(client, { TableName, Key: key(pk), token: 3n, UpdateExpression: 'SET fencing_token = :v', ExpressionAttributeValues: { ':v': { N: '99' } } }),
      fencedPutItem(client, { TableName, Item: { pk: { S: pk }, fencing_token: { N: '99' } }, token: 3n }),
      fencedPutItem(client, { TableName, Item: { pk: { S: pk }, fencing_deleted: { BOOL: false } }, token: 3n }),
      fencedPutItem(client, { TableName, Item: { pk: { S: pk } }, token: 3n, ConditionExpression: 'attribute_exists(fencing_deleted)' }),
      fencedPutItem(client, { TableName, Item: { pk: { S: pk } }, token: 3n, Expected: { v: { Exists: true } } } as never),
    ];
    for (const attempt of attempts) {
      const error = await expectRejects(attempt, InvalidArgumentError);
      expect(error.code).toBe('INVALID_ARGUMENT');
    }
    expect(await getItem(client, TableName, pk)).toEqual(before);
  });
});

describe('a corrupt fence', () => {
  it('a token stored as a string is a CorruptFenceError, not stale: nothing written, readFence refuses too', async () => {
    const pk = uniqueId('corrupt');
    await client.send(new PutItemCommand({ TableName, Item: { pk: { S: pk }, v: { S: 'a' }, fencing_token: { S: '5' } } }));
    for (const t of [1n, 5n, 1000n]) {
      const error = await expectRejects(fencedPutItem(client, { TableName, Item: { pk: { S: pk }, v: { S: 'b' } }, token: t }), CorruptFenceError);
      expect(error.code).toBe('CORRUPT_FENCE');
      expect(error.message).toMatch(/as type S, not a number/);
    }
    await expectRejects(fencedUpdateItem(client, { TableName, Key: key(pk), token: 1000n }), CorruptFenceError);
    await expectRejects(fencedDeleteItem(client, { TableName, Key: key(pk), token: 1000n }), CorruptFenceError);
    await expectRejects(readFence(client, { TableName, Key: key(pk) }), CorruptFenceError);
    expect(await getItem(client, TableName, pk)).toEqual({ pk: { S: pk }, v: { S: 'a' }, fencing_token: { S: '5' } });
  });

  it('a number that is not a token (0, negative, fractional) is reported by readFence', async () => {
    for (const N of ['0', '-3', '1.5']) {
      const pk = uniqueId('notatoken');
      await client.send(new PutItemCommand({ TableName, Item: { pk: { S: pk }, fencing_token: { N } } }));
      await expectRejects(readFence(client, { TableName, Key: key(pk) }), CorruptFenceError);
    }
  });
});

describe('bad input: a clear error, nothing written', () => {
  it('tokens out of range or of the wrong type', async () => {
    const pk = uniqueId('badtoken');
    for (const bad of [0n, -1n, MAX_TOKEN + 1n, 5, '5', null, undefined, 1.5]) {
      await expectRejects(fencedPutItem(client, { TableName, Item: { pk: { S: pk } }, token: bad as never }), InvalidTokenError);
      await expectRejects(fencedUpdateItem(client, { TableName, Key: key(pk), token: bad as never }), InvalidTokenError);
      await expectRejects(fencedDeleteItem(client, { TableName, Key: key(pk), token: bad as never }), InvalidTokenError);
    }
    expect(await getItem(client, TableName, pk)).toBeUndefined();
  });

  it('keys and attribute names with NUL or a lone surrogate; attribute options that would need escaping', async () => {
    const cases: Array<() => Promise<unknown>> = [
      () => fencedPutItem(client, { TableName, Item: { pk: { S: 'a\0b' } }, token: 1n }),
      () => fencedPutItem(client, { TableName, Item: { pk: { S: 'a\uD800b' } }, token: 1n }),
      () => fencedUpdateItem(client, { TableName, Key: { pk: { S: 'x\uDC00' } }, token: 1n }),
      () => fencedDeleteItem(client, { TableName, Key: { pk: { S: 'x\0' } }, token: 1n }),
      () => fencedPutItem(client, { TableName, Item: { pk: { S: 'ok-name' }, 'a\0': { S: 'v' } }, token: 1n }),
      () => fencedPutItem(client, { TableName, Item: { pk: { S: 'ok-name' }, m: { M: { 'k\uD800': { S: 'v' } } } }, token: 1n }),
      () => fencedUpdateItem(client, { TableName, Key: key('ok-name'), token: 1n, UpdateExpression: 'SET #a = :a', ExpressionAttributeNames: { '#a': 'x\0' }, ExpressionAttributeValues: { ':a': { S: 'v' } } }),
      () => fencedPutItem(client, { TableName, Item: { pk: { S: 'ok-name' } }, token: 1n }, { tokenAttribute: 'fencing.token' }),
      () => fencedPutItem(client, { TableName, Item: { pk: { S: 'ok-name' } }, token: 1n }, { tokenAttribute: 'fencing token' }),
      () => fencedPutItem(client, { TableName, Item: { pk: { S: 'ok-name' } }, token: 1n }, { tokenAttribute: '' }),
      () => fencedPutItem(client, { TableName, Item: { pk: { S: 'ok-name' } }, token: 1n }, { tombstoneAttribute: 'fencing_token' }),
      () => readFence(client, { TableName, Key: { pk: { S: 'x\uD800' } } }),
      () => fencedPutItem(client, { TableName: 'a/b', Item: { pk: { S: 'ok-name' } }, token: 1n }),
      () => fencedUpdateItem(client, { TableName, Key: {} as never, token: 1n }),
    ];
    for (const [i, attempt] of cases.entries()) {
      const error = await expectRejects(attempt(), InvalidArgumentError);
      expect(error.code, `case ${i}: ${error.message}`).toBe('INVALID_ARGUMENT');
    }
    expect(await getItem(client, TableName, 'ok-name')).toBeUndefined();
    expect(await getItem(client, TableName, 'x')).toBeUndefined();
  });

  it('a missing table: an error that says to create it', async () => {
    const missing = uniqueId('missing');
    for (const attempt of [
      fencedPutItem(client, { TableName: missing, Item: { pk: { S: 'a' } }, token: 1n }),
      fencedUpdateItem(client, { TableName: missing, Key: key('a'), token: 1n }),
      fencedDeleteItem(client, { TableName: missing, Key: key('a'), token: 1n }),
      readFence(client, { TableName: missing, Key: key('a') }),
    ]) {
      const error = await expectRejects(attempt, InvalidArgumentError);
      expect(error.message).toMatch(new RegExp(`table ${missing} does not exist .*create it first`));
    }
  });

  it('items over DynamoDB\'s 400 KB limit, put or updated', async () => {
    const pk = uniqueId('big');
    const big = await expectRejects(fencedPutItem(client, { TableName, Item: { pk: { S: pk }, body: { S: 'x'.repeat(400 * 1024) } }, token: 1n }), InvalidArgumentError);
    expect(big.message).toMatch(/over DynamoDB's item limit of 409600 bytes/);
    // Just under the limit before the fence's attribute: the fence's bytes push it over.
    const edge = 400 * 1024 - Buffer.byteLength(pk) - 'pk'.length - 'body'.length;
    await expectRejects(fencedPutItem(client, { TableName, Item: { pk: { S: pk }, body: { S: 'x'.repeat(edge) } }, token: 1n }), InvalidArgumentError);
    expect(await getItem(client, TableName, pk)).toBeUndefined();
    // An update that only the server can measure: the item grows past the limit.
    await fencedUpdateItem(client, { TableName, Key: key(pk), token: 1n, UpdateExpression: 'SET a = :a', ExpressionAttributeValues: { ':a': { S: 'x'.repeat(250_000) } } });
    const grown = await expectRejects(fencedUpdateItem(client, { TableName, Key: key(pk), token: 2n, UpdateExpression: 'SET b = :b', ExpressionAttributeValues: { ':b': { S: 'y'.repeat(250_000) } } }), InvalidArgumentError);
    expect(grown.message).toMatch(/larger than DynamoDB's 400 KB limit; nothing written/);
    const item = await getItem(client, TableName, pk);
    expect(item?.b).toBeUndefined();
    expect(token(item)).toBe('1');
  });
});
