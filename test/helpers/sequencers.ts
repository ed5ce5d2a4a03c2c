// The binding tests' sequencers (sequencer-postgres, -s3, -express): one
// source identity per file, the binding that guards a lock, the sequencers a
// bound fence must refuse, and the refusals published on fence:refused.
import diagnostics from 'node:diagnostics_channel';
import { CHANNELS, sequencer, type FenceBinding, type FenceRefusedMessage, type Sequencer } from '../../src/index.js';

export interface TestSource {
  readonly SOURCE: { readonly kind: 'zookeeper'; readonly id: string };
  /** The binding that lets only `lock`'s sequencers from SOURCE through. */
  guard(lock: string): FenceBinding;
  seq(name: string, token: bigint, over?: Partial<Sequencer>): Sequencer;
  /**
   * What a fence bound by guard(name) refuses even with a larger token (100
   * to 104): another lock, kind, source id or source kind, and a bare token.
   */
  intruders(name: string): [string, bigint | Sequencer][];
}

export function testSource(id: string): TestSource {
  const SOURCE = { kind: 'zookeeper', id } as const;
  const seq = (name: string, token: bigint, over: Partial<Sequencer> = {}): Sequencer => sequencer({ kind: 'lock', name, source: SOURCE, token, ...over });
  return {
    SOURCE,
    guard: (lock) => ({ kind: 'lock', lock, source: SOURCE }),
    seq,
    intruders: (name) => [
      ['another lock', seq(`${name}-other`, 100n)],
      ['another kind', seq(name, 101n, { kind: 'election' })],
      ['another source id', seq(name, 102n, { source: { kind: 'zookeeper', id: 'c0ffee00-0000-4000-8000-0000000000ff' } })],
      ['another source kind', seq(name, 103n, { source: { kind: 'etcd', id } })],
      ['a bare token', 104n],
    ],
  };
}

/** The fence:refused messages published from now until stop(). */
export function recordRefusals(): { readonly published: FenceRefusedMessage[]; stop(): void } {
  const published: FenceRefusedMessage[] = [];
  const onRefused = (m: unknown): void => void published.push(m as FenceRefusedMessage);
  diagnostics.subscribe(CHANNELS.fenceRefused, onRefused);
  return { published, stop: () => diagnostics.unsubscribe(CHANNELS.fenceRefused, onRefused) };
}
