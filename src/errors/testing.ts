// Errors of fencekeeper/testing: the servers it starts.
import { FencekeeperError, type FencekeeperErrorOptions } from './base.js';

/**
 * fencekeeper/testing: a throwaway server cannot start because its program
 * is not on this machine. `missing` names what was looked for (a path, a
 * command), `install` what provides it.
 */
export class ServerNotInstalledError extends FencekeeperError {
  static override readonly kind: string = 'ServerNotInstalledError';
  readonly missing: string;
  readonly install: string;
  constructor(missing: string, install: string, message: string, options?: FencekeeperErrorOptions) {
    super('SERVER_NOT_INSTALLED', message, options);
    this.missing = missing;
    this.install = install;
  }
}

/**
 * fencekeeper/testing: a throwaway server exited or did not become ready in
 * time. `log` holds the last lines it wrote.
 */
export class ServerStartError extends FencekeeperError {
  static override readonly kind: string = 'ServerStartError';
  readonly log: string;
  constructor(message: string, log: string, options?: FencekeeperErrorOptions) {
    super('SERVER_START_FAILED', message, options);
    this.log = log;
  }
}
