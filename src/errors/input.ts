// Errors about what a caller passed: a token that is not one, an unusable
// argument.
import { FencekeeperError, type FencekeeperErrorOptions } from './base.js';

/** Text that is not a token: not a decimal integer in 1..2^63-1. */
export class InvalidTokenError extends FencekeeperError {
  static override readonly kind: string = 'InvalidTokenError';
  constructor(message: string, options?: FencekeeperErrorOptions) { super('INVALID_TOKEN', message, options); }
}

/** A caller passed something unusable (a bad path, a bad option, a bad identifier). */
export class InvalidArgumentError extends FencekeeperError {
  static override readonly kind: string = 'InvalidArgumentError';
  constructor(message: string, options?: FencekeeperErrorOptions) { super('INVALID_ARGUMENT', message, options); }
}
