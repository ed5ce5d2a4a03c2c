// Captures the FENCEKEEPER_SELF_WAIT process warnings a test causes (process.emitWarning
// delivers them on a later tick: read `seen()` after `settle()`).
import { setImmediate as nextTurn } from 'node:timers/promises';
import { afterEach, beforeEach } from 'vitest';

/** The self-wait warnings seen during each test (cleared before each). */
export function selfWaitWarnings(): { seen(): string[]; settle(): Promise<void> } {
  let seen: string[] = [];
  const listener = (warning: Error & { code?: string }): void => {
    if (warning.code === 'FENCEKEEPER_SELF_WAIT') seen.push(warning.message);
  };
  beforeEach(() => {
    seen = [];
    process.on('warning', listener);
  });
  afterEach(() => {
    process.off('warning', listener);
  });
  return {
    seen: () => seen,
    settle: async () => {
      await nextTurn();
      await nextTurn();
    },
  };
}
