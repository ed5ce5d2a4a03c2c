/**
 * The CLI's exit codes, from sysexits.h where one fits, so scripts can tell
 * "the lock is busy, try later" from "misconfigured" from "the command failed".
 * A supervised command's own exit code passes through unchanged.
 */
export const ExitCode = {
  ok: 0,
  /** Bad flags or arguments. */
  usage: 64,
  /** ZooKeeper (or the database) could not be reached. */
  unavailable: 69,
  /** Internal error. */
  software: 70,
  /** The lock was not acquired within --timeout: try again later. */
  lockTimeout: 75,
  /** The lock was lost while the command ran and the command was stopped (it exited 0 anyway). */
  lockLost: 76,
} as const;
