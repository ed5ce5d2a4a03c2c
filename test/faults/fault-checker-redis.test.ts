// The short fault-injection run on redis: the single-instance lock on the
// primary of FK_REDIS_PAIR, failed over to its replica in sync and held back.
// What it asserts: fault-run-case.ts.
import { describeFaultRun } from './fault-run-case.js';

describeFaultRun('redis');
