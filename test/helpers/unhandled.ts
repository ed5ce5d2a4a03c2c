// Unhandled promise rejections during each test of a file, counted here as
// well as by vitest (which fails the run on one), so an assertion can name
// them: `const unhandled = countUnhandledRejections();` at the top of the file,
// then `expect(unhandled.messages()).toEqual([])`.
import { afterEach, beforeEach } from 'vitest';

export interface UnhandledRejections {
  /** The reasons seen since the current test began. */
  readonly reasons: readonly unknown[];
  /** Their messages (String() for a reason that is not an Error). */
  messages(): string[];
}

export function countUnhandledRejections(): UnhandledRejections {
  const reasons: unknown[] = [];
  const count = (reason: unknown): void => {
    reasons.push(reason);
  };
  beforeEach(() => {
    reasons.length = 0;
    process.on('unhandledRejection', count);
  });
  afterEach(() => {
    process.off('unhandledRejection', count);
  });
  return { reasons, messages: () => reasons.map((r) => String((r as Error | undefined)?.message ?? r)) };
}
