/**
 * Tools for tests against lock loss: throwaway ZooKeeper and Redis servers, a
 * TCP proxy that cuts or black-holes connections, session expiry, paused
 * holders, write histories. Guide: docs/testing.md in the package.
 *
 * @module fencekeeper/testing
 */
// fencekeeper/testing: what fencekeeper's own suite uses to test lock loss
// against real servers, for your tests of your own resources. Nothing here
// is loaded by 'fencekeeper' itself; none of it belongs in production code.
//
//   startZooKeeper, startRedis        throwaway servers on ports of their own
//   TcpProxy                          cut, black-hole or delay a client's connection
//   sessionRecorder, expireSession    end a ZooKeeper session from the server's side, now
//   spawnHolder, reportHolding, ...   a lock holder in its own process, frozen past its session
//   WriteHistory, checkHistory        record your holders' writes, check what the resource applied
//   memorySource                      a LockSource in one process for unit tests (never for production)
export { startZooKeeper } from './zookeeper-server.js';
export type { ZooKeeperServer, ZooKeeperServerOptions } from './zookeeper-server.js';
export { startRedis } from './redis-server.js';
export type { RedisServer, RedisServerOptions } from './redis-server.js';
export type { ThrowawayServer } from './server-process.js';
export { TcpProxy } from './tcp-proxy.js';
export type { ProxyOptions, ProxyTarget } from './tcp-proxy.js';
export { expireSession, sessionRecorder } from './expire-session.js';
export type { ExpireSessionOptions } from './expire-session.js';
export { reportHolding, reportToTest, spawnHolder } from './paused-holder.js';
export type { HolderExit, HolderProcess, HolderReport, PausePastSessionOptions, SpawnHolderOptions } from './paused-holder.js';
export { WriteHistory, checkHistory } from './history.js';
export { memorySource } from './memory-source.js';
export type { MemorySource, MemorySourceOptions } from './memory-source.js';
export type {
  AppliedWrite,
  HistoryCheck,
  HistoryViolation,
  HistoryViolationKind,
  RecordOptions,
  RecordedOutcome,
  RecordedWrite,
  ResourceHistory,
  WriteOutcome,
} from './history.js';
export { ServerNotInstalledError, ServerStartError } from '../errors.js';
