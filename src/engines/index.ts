/** Transport to inference engines: per-worker undici pools, SSE parsing, cancellation, error mapping, P/D dialects. */
export { SseParser } from './sse-parser.js';
export { DEFAULT_MAX_RESPONSE_BYTES, EngineClient } from './engine-client.js';
export type { EngineClientOptions, DispatchOptions } from './engine-client.js';
export type { EngineEventStream, EngineEvent, EngineResponse } from './engine-stream.js';
export {
  EngineHttpError,
  isMigratable,
  malformedEventError,
  protocolViolationOf,
  unfinishedStreamError,
} from './engine-errors.js';
export { EngineStreamError, refusalBody } from './refusal.js';
export { serializeBody, applyFields } from './request-body.js';
export type { JsonObject } from './request-body.js';
export {
  NO_LEG_FIELDS,
  DP_RANK_HEADER,
  mergeLegFields,
  dpRankLegFields,
  oneTokenPrefillFields,
  streamingBodyFields,
  clientWantsUsage,
  answersInOneToken,
} from './leg-fields.js';
export type { LegFields } from './leg-fields.js';
export {
  VLLM_PREFILL_KV_TRANSFER_PARAMS,
  vllmPrefillLegFields,
  vllmDecodeLegFields,
  readVllmPrefillResult,
} from './dialect-vllm.js';
export { bootstrapFields, sglangPrefillLegFields, sglangDecodeLegFields } from './dialect-sglang.js';
export type { BootstrapInfo } from './dialect-sglang.js';
export { readChunkInfo, isUsageOnlyChunk } from './openai-chunk.js';
export { eventInfo, isPlainChunk, leanChunk } from './stream-event.js';
export { ResponseAssembler } from './assemble-response.js';
export { MessagesAssembler, ResponsesAssembler } from './assemble-agent.js';
export type { StreamAssembler } from './assemble-agent.js';
export type { ChunkInfo } from './openai-chunk.js';
