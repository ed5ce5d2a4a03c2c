// The short fault-injection run on redlock: Redlock over the five nodes of
// FK_REDLOCK, one restarted from its AOF and one paused.
// What it asserts: fault-run-case.ts.
import { describeFaultRun } from './fault-run-case.js';

describeFaultRun('redlock');
