// The short fault-injection run on ZooKeeper (the 3-node ensemble, its
// leader killed); the same run on the other sources is in
// fault-checker-{redis,redlock,etcd}.test.ts. What it asserts: fault-run-case.ts.
import { describeFaultRun } from './fault-run-case.js';

describeFaultRun('zookeeper');
