/** Transport to inference engines: per-worker undici pools, SSE parsing, cancellation, error mapping, P/D dialects. */
export { SseParser } from './sse-parser.js';
export type { SseEventHandler, SseParserOptions } from './sse-parser.js';
export { EngineClient, normalizeWorkerUrl } from './engine-client.js';
export type { EngineClientOptions, DispatchOptions, WorkerPoolStats } from './engine-client.js';
export type { EngineEventStream, EngineEvent, EngineJsonResponse, EngineResponse, DispatchTimings, StreamCounters } from './engine-stream.js';
export { EngineHttpError } from './engine-errors.js';
export type { DispatchPhase } from './engine-errors.js';
export { serializeBody, applyFields } from './request-body.js';
export type { JsonObject } from './request-body.js';
