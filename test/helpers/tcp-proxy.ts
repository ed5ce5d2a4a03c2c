// The tests' TCP proxy is the one fencekeeper/testing ships to users
// (src/testing/tcp-proxy.ts): one home, so the faults the suite relies on are
// the ones users get.
export { TcpProxy } from '../../src/testing/tcp-proxy.js';
export type { ProxyOptions, ProxyTarget } from '../../src/testing/tcp-proxy.js';
