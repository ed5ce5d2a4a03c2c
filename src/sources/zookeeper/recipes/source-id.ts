/**
 * The identity of a ZooKeeper ensemble, for sequencers (../../sequencer.ts).
 *
 * An ensemble has no id of its own that every client can read and that
 * survives restarts, so we keep one: a UUID in the persistent znode
 * /fencekeeper/source-id (under the client's chroot, if any: locks under two
 * chroots are different locks), made once by the first client that asks.
 * Every client creates it with its own fresh UUID if it is absent, then reads
 * it: when two first clients race, one create wins and the other gets
 * NODEEXISTS, and both read the winner's UUID. The node's ACL is world-read
 * only, so once made nobody can change it (only the parent's owner could
 * delete it, which would give the ensemble a new identity and lock every
 * bound fence out: the safe direction).
 *
 * Asked once per client: the first grant waits for it (one or two round
 * trips), every later one reads it from here.
 */
import { randomUUID } from 'node:crypto';
import { ConnectionLossError, isCode, ProtocolError } from '../../../errors.js';
import { READ_ACL_UNSAFE } from '../protocol.js';
import type { SourceIdentity } from '../../../sequencer.js';
import { SourceIdentityCache } from '../../../source-identity.js';
import type { ZooKeeperClient } from '../client.js';

export const SOURCE_ID_PATH = '/fencekeeper/source-id';
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/** The ensemble's identity, read (and made, the first time anywhere) once per client. */
export const zookeeperSourceIds = new SourceIdentityCache<ZooKeeperClient>(async (zk) => ({ kind: 'zookeeper', id: await readOrCreate(zk) }));

/** The ensemble's identity as this client reads it (cached after the first call). */
export function zookeeperSourceId(zk: ZooKeeperClient): Promise<SourceIdentity> {
  return zookeeperSourceIds.of(zk);
}

async function readOrCreate(zk: ZooKeeperClient): Promise<string> {
  for (let attempt = 0; ; attempt++) {
    try {
      try {
        await zk.create(SOURCE_ID_PATH, randomUUID(), { mode: 'persistent', acl: READ_ACL_UNSAFE });
      } catch (error) {
        if (isCode(error, 'ZK_NONODE') && attempt < 5) {
          // The first client of a fresh ensemble: make /fencekeeper (open, like the lock roots) and try again.
          await zk.create('/fencekeeper', null, { mode: 'persistent' }).catch((e: unknown) => {
            if (!isCode(e, 'ZK_NODEEXISTS')) throw e;
          });
          continue;
        }
        // Someone made it first (or our own create landed before a lost reply): read theirs.
        if (!isCode(error, 'ZK_NODEEXISTS')) throw error;
      }
      const { data } = await zk.getData(SOURCE_ID_PATH);
      const id = new TextDecoder().decode(data);
      if (!UUID.test(id)) throw new ProtocolError(`${SOURCE_ID_PATH} does not hold a UUID (${JSON.stringify(id.slice(0, 40))}): it is not fencekeeper's`);
      return id;
    } catch (error) {
      // A create lost with the connection may or may not have landed: asking again settles it either way.
      if (!(error instanceof ConnectionLossError)) throw error;
    }
  }
}
