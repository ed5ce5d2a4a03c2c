/**
 * A source's identity (./sequencer.ts SourceIdentity), asked once per client
 * and kept: what every source's grants share to build their `sequencer`.
 *
 * The identity is read after a client's first grant and before that grant is
 * handed out, so a call with bad arguments still sends nothing, and every
 * later grant of the client reads it from memory: the acquire path of a warm
 * client gains no request, no await and no allocation (the sequencer itself
 * is made when the holder first reads it).
 */
import { sequencer, type Sequencer, type SequencerKind, type SourceIdentity } from './sequencer.js';
import type { FencingToken } from './token.js';

/** `Setting`: what the read needs besides the client (a Redis node timeout), passed by each grant. */
export class SourceIdentityCache<Client extends object, Setting = undefined> {
  readonly #known = new WeakMap<Client, SourceIdentity>();
  readonly #asking = new WeakMap<Client, Promise<SourceIdentity>>();
  readonly #ask: (client: Client, setting: Setting) => Promise<SourceIdentity>;

  /** `ask` reads (or makes) the identity; a failure is not kept: the next grant asks again. */
  constructor(ask: (client: Client, setting: Setting) => Promise<SourceIdentity>) {
    this.#ask = ask;
  }

  /** The identity, if this client has read it. */
  known(client: Client): SourceIdentity | undefined {
    return this.#known.get(client);
  }

  /** The identity, as the source sent it with a reply the grant needed anyway (etcd: every response header). */
  learn(client: Client, identity: SourceIdentity): void {
    if (!this.#known.has(client)) this.#known.set(client, Object.freeze({ kind: identity.kind, id: identity.id }));
  }

  /** The identity, asked at most once at a time per client. */
  of(client: Client, ...setting: Setting extends undefined ? [] : [Setting]): Promise<SourceIdentity> {
    const known = this.#known.get(client);
    if (known !== undefined) return Promise.resolve(known);
    let pending = this.#asking.get(client);
    if (pending === undefined) {
      pending = this.#ask(client, setting[0] as Setting).then(
        (identity) => {
          const frozen = Object.freeze({ kind: identity.kind, id: identity.id });
          this.#known.set(client, frozen);
          this.#asking.delete(client);
          return frozen;
        },
        (error: unknown) => {
          this.#asking.delete(client);
          throw error;
        },
      );
      this.#asking.set(client, pending);
    }
    return pending;
  }

  /**
   * `granting` as it is when the client knows its identity already; for the
   * client's first grant, the grant once the identity is read too. If that
   * read fails, the grant is given back (`leave`) and the acquire rejects
   * with the read's error: a grant without its sequencer is never handed out.
   * `options` are the acquire's: when their `signal` aborted while the
   * identity was read (the grant itself was decided before), the grant is
   * given back too and the acquire rejects with the signal's reason, as the
   * contract promises for a grant that arrives after its signal aborted.
   */
  afterGrant<T>(client: Client, granting: Promise<T | null>, leave: (grant: T) => Promise<void>, options: unknown, ...setting: Setting extends undefined ? [] : [Setting]): Promise<T | null> {
    if (this.#known.has(client)) return granting;
    return granting.then(async (grant) => {
      if (grant === null) return null;
      try {
        await this.of(client, ...setting);
      } catch (error) {
        await leave(grant).catch(() => undefined);
        throw error;
      }
      const signal = signalOf(options);
      if (signal?.aborted === true) {
        await leave(grant).catch(() => undefined);
        throw signal.reason;
      }
      return grant;
    });
  }
}

/** The acquire options' `signal`, if they carry one (the options were checked by the acquire already). */
function signalOf(options: unknown): AbortSignal | undefined {
  if (options === null || typeof options !== 'object') return undefined;
  const signal = (options as { readonly signal?: unknown }).signal;
  return signal instanceof AbortSignal ? signal : undefined;
}

/**
 * A grant's sequencer, made when its holder first reads it. `identity` is
 * the client's known identity, which the acquire waited for before handing
 * the grant out.
 */
export function grantSequencer(kind: SequencerKind, name: string, identity: SourceIdentity | undefined, token: FencingToken): Sequencer {
  if (identity === undefined) throw new Error(`unreachable: ${kind} ${name} was granted before its source's identity was known`);
  return sequencer({ kind, name, source: identity, token });
}
