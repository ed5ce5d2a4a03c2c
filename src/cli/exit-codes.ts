/**
 * The CLI's exit codes, from sysexits.h where one fits, so scripts can tell
 * "the lock is busy, try later" from "misconfigured" from "the command
 * failed". A supervised command's own exit code passes through unchanged.
 * Each is listed in `fencekeeper --help` and in the CLI guide (docs/cli.md).
 */
export const ExitCode = {
  ok: 0,
  /** demo: a stale write was accepted. */
  demoFailed: 1,
  /** Bad flags, arguments or lock name; a margin or grace that does not fit the session. */
  usage: 64,
  /** ZooKeeper (or the database) could not be reached, or the session ended while waiting. */
  unavailable: 69,
  /** Internal error: a bug. */
  software: 70,
  /** The lock service refused our credentials (digest auth failed, or the identity may not use the lock). */
  noPermission: 77,
  /** The lock was not acquired within --timeout: try again later. */
  lockTimeout: 75,
  /** The lock was lost: the command was stopped (and exited 0) or never started. */
  lockLost: 76,
  /** The command could not be started. */
  cannotRun: 127,
  /** 128 + n: interrupted by signal n while connecting or waiting for the lock (or the command ended by it). */
  signalBase: 128,
} as const;
