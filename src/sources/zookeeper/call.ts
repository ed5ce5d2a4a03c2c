/**
 * One request of a session on its way, as the connection's in-flight queue
 * holds it: its encoder, and on the reply the caller's promise settled and
 * the request's watch registered (only once the reply shows the server set
 * it: a watch the server refused would never fire).
 */
import { ZooKeeperError } from '../../errors.js';
import type { PendingRequest } from './connection.js';
import type { JuteReader } from './jute-reader.js';
import type { JuteWriter } from './jute-writer.js';
import { Err, errorCodeName } from './protocol.js';
import type { Request } from './requests.js';
import type { WatchRegistry } from './watches.js';

/**
 * A request of this session, on its way: settles the caller's promise and
 * registers the request's watch once the reply shows the server set it.
 */
export class Call<T> implements PendingRequest {
  readonly opcode: number;
  xid = 0;
  sentAt = 0;

  constructor(
    readonly request: Request<T>,
    readonly watches: WatchRegistry,
    readonly resolve: (value: T) => void,
    readonly reject: (error: Error) => void,
  ) {
    this.opcode = request.opcode;
  }

  encode(w: JuteWriter): void {
    this.request.encode(w);
  }

  answer(err: number, r: JuteReader): void {
    const request = this.request;
    if (err !== Err.ok) {
      if (request.watcher !== undefined) this.#registerWatch(err);
      const recovered = request.recover?.(err);
      if (recovered !== undefined) this.resolve(recovered.value);
      else this.reject(new ZooKeeperError(errorCodeName(err), err, request.path));
      return;
    }
    let value: T;
    try {
      value = request.decode(r);
    } catch (error) {
      // A well-formed reply that reports failure (a multi): the connection stays.
      if (error instanceof ZooKeeperError) {
        this.reject(error);
        return;
      }
      throw error;
    }
    if (request.watcher !== undefined) this.#registerWatch(err);
    this.resolve(value);
  }

  fail(error: Error): void {
    this.reject(error);
  }

  #registerWatch(err: number): void {
    const { watcher, watchKind, path } = this.request;
    if (watcher === undefined || watchKind === undefined || path === undefined) return;
    const kind = watchKind(err);
    if (kind !== null) this.watches.add(kind, path, watcher);
  }
}
