// postgresSource's observeLeader against the real PostgreSQL, as the
// ZooKeeper and etcd sources' observeLeader: who leads an election without
// campaigning, answered from a cache a NOTIFY keeps fresh, onChange on each
// change of leader, nothing after close.
import { describe, expect, it } from 'vitest';
import { InvalidArgumentError } from '../../../src/index.js';
import { sourceSchema, uniqueName } from './helpers.js';
import { until, within } from '../../helpers/wait.js';

const db = sourceSchema('pgsrc_leader');

describe('postgresSource: observeLeader', () => {
  it('the current leader (id, epoch, entry) from a NOTIFY-fresh cache; the next leader after a resignation; null when nobody leads', async () => {
    const name = uniqueName('pgsource/leader');
    const watcher = db.source({}, 3);
    const a = db.source({}, 3);
    const b = db.source({}, 3);
    const observer = watcher.observeLeader(name);
    expect(await observer.current()).toBeNull();
    let changes = 0;
    observer.onChange(() => changes++);
    const first = await a.campaign(name, { id: 'candidate-a' });
    await until(() => changes > 0, 'a change after the election');
    expect(await observer.current()).toEqual({ id: 'candidate-a', epoch: first.epoch, entry: first.entry });
    // A waiting candidate is not a leader: the observer still names the first.
    const seen = changes;
    const second = b.campaign(name, { id: 'candidate-b' });
    await until(() => changes > seen, 'a change after the second candidate joined');
    expect((await observer.current())?.id).toBe('candidate-a');
    const before = changes;
    await first.resign();
    const next = await within(second, 10_000, 'the second candidate elected');
    await until(() => changes > before, 'a change after the resignation');
    expect(await observer.current()).toEqual({ id: 'candidate-b', epoch: next.epoch, entry: next.entry });
    expect(next.epoch > first.epoch).toBe(true);
    observer.close();
    const closedAt = changes;
    await next.resign();
    // Still answers after close, with a fresh read; no change reported.
    expect(await observer.current()).toBeNull();
    expect(changes).toBe(closedAt);
    expect(() => watcher.observeLeader('a\0b')).toThrow(InvalidArgumentError);
  });
});
