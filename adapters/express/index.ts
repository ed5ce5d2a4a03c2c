// fencekeeper/express: refuse stale fencing tokens where an HTTP resource lives.
//
// The guarantee. For one resource, a request carrying token n is never handled
// concurrently with, or after, a request carrying a larger token has been
// admitted. fencing() reads the token from a header, lets `verify` check it
// with the lock service, then asks the FenceStore to admit it: the store
// compares it with the resource's high-water mark (equal passes: the same
// holder writes many times; smaller is refused with 409) and holds the
// resource's fence from admission until the response has finished or the
// connection closed. So the check and the handler's writes are one critical
// section: a holder paused for 25 s cannot slip a write in between.
//
// Settling. When the response has finished (res 'finish'; settled at the
// 'close' Node emits right after it) the admission is committed if the
// status is below 500 and aborted otherwise (a handler that threw, or called
// next(err) and got a 5xx: its writes through req.fencing.transaction are
// undone). When the connection closes before the response finished, the
// admission is aborted and req.fencing.signal aborts. Either way the fence
// keeps the admitted token: the handler may already have written somewhere
// no store can undo, so no smaller token may follow it. A client that leaves while waiting for
// admission stops waiting and leaves nothing held. A refused request (400,
// 403, 409, 428, 503, or the 4xx a `resource` function throws) changes nothing.
//
// Answers (application/problem+json, type about:blank, with a `code`):
// 428 MISSING_TOKEN · 400 INVALID_TOKEN (also an empty value) · 400
// REPEATED_TOKEN (the header sent more than once, detected on rawHeaders) ·
// 403 TOKEN_REFUSED (verify did not return true) · 503 VERIFY_UNAVAILABLE
// (verify threw: the lock service, not the client) · 409 STALE_TOKEN (with
// resource, presented, current as decimal strings) · 503 FENCE_UNAVAILABLE
// (the store failed) · the 4xx a `resource` function throws (RESOURCE_REFUSED)
// · 500 RESOURCE_UNRESOLVED (the `resource` function is broken).
//
// Limits.
// - The fence covers the handler only until its response ends. A handler that
//   keeps writing after res.end(), or after its client left (watch
//   req.fencing.signal), writes outside the fence; writes through
//   req.fencing.transaction (PostgresFenceStore) roll back instead.
// - A handler that never answers holds the fence for as long as its
//   connection stays open: set server.requestTimeout / a response timeout.
// - The response is sent before the store commits. If a commit fails (the
//   database went away) the client has seen success for an advance that did
//   not happen; such failures go to NODE_DEBUG=fencekeeper.
// - Without `verify`, a client can send a huge token and lock every honest
//   holder out: the header is client input. Use verify (verifyWithZooKeeper)
//   wherever clients are not trusted.
// - MemoryFenceStore is one process's memory: not for a service with more
//   than one instance or one that must remember its fences across restarts.
// - Status 500 only for the application's own bug (a `resource` function that
//   throws without a 4xx status, or returns no resource name); nothing a
//   client sends answers 500.
export { fencing } from './middleware.js';
export type { FencingContext, FencingOptions } from './middleware.js';
export { MemoryFenceStore } from './memory-store.js';
export { verifyWithZooKeeper } from './verify-zookeeper.js';
export type { ZooKeeperVerifier } from './verify-zookeeper.js';
export type { FencingProblem, ProblemCode } from './problem.js';
export { fencingHeaders, fencedFetch } from './client.js';
export type { FetchLike, FencedFetch, TokenHolder } from './client.js';
// Re-exported so that a custom store needs only this entry point.
export type { FenceAdmission, FenceStore, FencingToken } from '../../src/index.js';
