/**
 * Every error fencekeeper throws, one place to import them from: the base
 * class and its stable codes (errors/base.ts), then the errors by domain.
 * Callers classify errors by `code` (or instanceof), never by message text.
 */
export * from './errors/base.js';
export * from './errors/input.js';
export * from './errors/locks.js';
export * from './errors/fences.js';
export * from './errors/outcomes.js';
export * from './errors/testing.js';
