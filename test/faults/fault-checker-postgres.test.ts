// The short fault-injection run on PostgreSQL: postgresSource on a cluster
// the checker owns (test/servers/pg-replica.sh on its own ports), its primary
// SIGKILLed and restarted, workers' connections cut through proxies of the
// harness, fresh holders SIGSTOPped past their lease.
// What it asserts: fault-run-case.ts.
import { describeFaultRun } from './fault-run-case.js';

describeFaultRun('postgres');
