// fencekeeper/dynamodb's refusal path where the service returns the item with
// ConditionalCheckFailedException (ReturnValuesOnConditionCheckFailure:
// 'ALL_OLD', which DynamoDB honours and dynalite 4 ignores): a fake client
// stands in for that one edge, and shows that no read follows. The joining
// of update expressions is checked here too. Everything else runs against
// dynalite in test/integration/dynamodb*.test.ts.
import { ConditionalCheckFailedException, GetItemCommand, PutItemCommand, UpdateItemCommand, type DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { describe, expect, it } from 'vitest';
import { CorruptFenceError, StaleTokenError } from '../../src/index.js';
import { fencedPutItem, fencedUpdateItem } from '../../adapters/dynamodb/index.js';
import { fenceUpdate } from '../../adapters/dynamodb/expressions.js';

/** A client whose writes fail the condition, returning `item` with the exception; reads are counted. */
function refusingClient(item: Record<string, unknown> | undefined): { client: DynamoDBClient; sent: string[] } {
  const sent: string[] = [];
  const client = {
    async send(command: unknown) {
      sent.push((command as object).constructor.name);
      if (command instanceof PutItemCommand || command instanceof UpdateItemCommand) {
        expect(command.input.ReturnValuesOnConditionCheckFailure).toBe('ALL_OLD');
        throw new ConditionalCheckFailedException({ message: 'The conditional request failed', $metadata: {}, ...(item === undefined ? {} : { Item: item as never }) });
      }
      if (command instanceof GetItemCommand) return { Item: { pk: { S: 'a' }, fencing_token: { N: '1' } } };
      // DescribeTable (the put's key schema)
      return { Table: { KeySchema: [{ AttributeName: 'pk', KeyType: 'HASH' }] } };
    },
  } as unknown as DynamoDBClient;
  return { client, sent };
}

describe('a refusal with the item returned (ReturnValuesOnConditionCheckFailure)', () => {
  it('a larger stored token: StaleTokenError with it, and no read', async () => {
    const { client, sent } = refusingClient({ pk: { S: 'a' }, fencing_token: { N: '9' } });
    const error = await fencedUpdateItem(client, { TableName: 'tbl', Key: { pk: { S: 'a' } }, token: 4n }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(StaleTokenError);
    expect((error as StaleTokenError).current).toBe(9n);
    expect((error as StaleTokenError).presented).toBe(4n);
    expect(sent).toEqual(['UpdateItemCommand']);
  });

  it('a token stored as a string: CorruptFenceError, and no read', async () => {
    const { client, sent } = refusingClient({ pk: { S: 'a' }, fencing_token: { S: '9' } });
    const error = await fencedPutItem(client, { TableName: 'tbl', Item: { pk: { S: 'a' } }, token: 4n }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(CorruptFenceError);
    expect(sent).toEqual(['DescribeTableCommand', 'PutItemCommand']);
  });

  it('a smaller or equal stored token: the caller\'s own condition failed, its exception passes through', async () => {
    const { client, sent } = refusingClient({ pk: { S: 'a' }, fencing_token: { N: '4' } });
    const error = await fencedUpdateItem(client, { TableName: 'tbl', Key: { pk: { S: 'a' } }, token: 4n, ConditionExpression: 'attribute_exists(pk)' }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ConditionalCheckFailedException);
    expect(sent).toEqual(['UpdateItemCommand']);
  });

  it('no item with the exception (dynalite): one consistent read decides', async () => {
    const { client, sent } = refusingClient(undefined);
    const error = await fencedUpdateItem(client, { TableName: 'tbl', Key: { pk: { S: 'a' } }, token: 4n }).catch((e: unknown) => e);
    // The fake's read shows token 1: not stale, so the exception passes through.
    expect(error).toBeInstanceOf(ConditionalCheckFailedException);
    expect(sent).toEqual(['UpdateItemCommand', 'GetItemCommand']);
  });
});

describe('joining the fence\'s update with yours', () => {
  it.each([
    [undefined, 'SET #fk_t = :fk_t REMOVE #fk_d'],
    ['SET a = :a', 'SET #fk_t = :fk_t, a = :a REMOVE #fk_d'],
    ['set a = :a remove b', 'set #fk_t = :fk_t, a = :a remove #fk_d, b'],
    ['ADD n :one', 'ADD n :one SET #fk_t = :fk_t REMOVE #fk_d'],
    ['REMOVE b SET #set = :remove', 'REMOVE #fk_d, b SET #fk_t = :fk_t, #set = :remove'],
    ['SET my_set = :v, a.set2 = :w DELETE s :x', 'SET #fk_t = :fk_t, my_set = :v, a.set2 = :w DELETE s :x REMOVE #fk_d'],
  ])('%s', (user, joined) => {
    expect(fenceUpdate(user)).toBe(joined);
  });
});
