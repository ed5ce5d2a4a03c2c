// The etcd source with a 10 s lease, for tests that are not about losing it:
// the shared ETCD entry's 2 s lease is for the paused-holder tests, and on a
// loaded machine a lease that short can lapse between keepalives.
import { Etcd3 } from 'etcd3';
import { etcdSession, etcdSource } from '../../src/sources/etcd/index.js';
import { ETCD, type SourceUnderTest } from './sources.js';
import { environmentServers as testServers } from './server-env.js';

export const ETCD_LONG_LEASE: SourceUnderTest = {
  ...ETCD,
  grantMs: 10_000,
  async open() {
    const etcd = new Etcd3({ hosts: testServers().etcd });
    return {
      source: etcdSource(etcd, { ttlSeconds: 10 }),
      close: async () => {
        await etcdSession(etcd).close();
        etcd.close();
      },
    };
  },
};
