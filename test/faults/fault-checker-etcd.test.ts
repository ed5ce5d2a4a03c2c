// The short fault-injection run on etcd: the 3-node etcd cluster
// (FK_ETCD_CLUSTER), its leader killed.
// What it asserts: fault-run-case.ts.
import { describeFaultRun } from './fault-run-case.js';

describeFaultRun('etcd');
