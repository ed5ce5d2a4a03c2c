/**
 * fencekeeper's diagnostics channels as OpenTelemetry spans and metrics:
 * instrument() and uninstrument(). Guide: docs/opentelemetry.md in the
 * package.
 *
 * @module fencekeeper/opentelemetry
 */
// fencekeeper/opentelemetry: fencekeeper's diagnostics channels as
// OpenTelemetry spans and metrics. @opentelemetry/api is an optional peer
// dependency of this entry alone; register an SDK (or pass providers), then
// call instrument().
export { instrument, uninstrument, SCOPE } from './instrument.js';
export type { InstrumentOptions } from './instrument.js';
export { METRICS } from './metrics.js';
export { ATTR } from './attributes.js';
export type { NameMapping } from './attributes.js';
