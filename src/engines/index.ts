/** Transport to inference engines: per-worker undici pools, SSE parsing, cancellation, error mapping, P/D dialects. */
export { SseParser } from './sse-parser.js';
export { EngineClient } from './engine-client.js';
export type { EngineClientOptions, DispatchOptions } from './engine-client.js';
export type { EngineEventStream, EngineEvent, EngineResponse } from './engine-stream.js';
export { EngineHttpError, isMigratable, protocolViolationOf } from './engine-errors.js';
export { refusalBody } from './refusal.js';
export { serializeBody, applyFields } from './request-body.js';
export type { JsonObject } from './request-body.js';
export { EMPTY_LEG, DP_RANK_HEADER, mergeLegs, dpRankLeg, oneTokenPrefillFields, streamingLegFields, clientWantsUsage } from './engine-leg.js';
export type { EngineLeg } from './engine-leg.js';
export { VLLM_PREFILL_KV_TRANSFER_PARAMS, vllmPrefillLeg, vllmDecodeLeg, readVllmPrefillResult } from './dialect-vllm.js';
export { bootstrapFields, sglangPrefillLeg, sglangDecodeLeg } from './dialect-sglang.js';
export type { BootstrapInfo } from './dialect-sglang.js';
export { readChunkInfo, isUsageOnlyChunk } from './openai-chunk.js';
export { eventInfo, isPlainChunk } from './stream-event.js';
export { ResponseAssembler } from './assemble-response.js';
export type { ChunkInfo } from './openai-chunk.js';
