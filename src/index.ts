// The public surface of 'fencekeeper'. Everything a user may import is named
// here; nothing internal is re-exported wholesale.
export type { FencingToken } from './token.js';
export { parseToken, formatToken, assertToken, MAX_TOKEN } from './token.js';
export type { ErrorCode, ZooKeeperErrorCode, FencekeeperErrorOptions } from './errors.js';
export {
  FencekeeperError,
  StaleTokenError,
  InvalidTokenError,
  InvalidArgumentError,
  LockLostError,
  LockTimeoutError,
  SessionExpiredError,
  ConnectionLossError,
  ClientClosedError,
  ProtocolError,
  UnknownOutcomeError,
  ZooKeeperError,
} from './errors.js';
export type { FenceStore, FenceAdmission } from './fence.js';
