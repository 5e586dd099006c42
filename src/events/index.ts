/**
 * KV-event ingestion: decoding vLLM and SGLang KV-cache events from ZMQ,
 * keeping the prefix index true per (worker, dp rank) with sequence cursors,
 * replay and restart handling, and reporting which workers' events can be
 * trusted. See README.md in this folder for who owns what.
 */
export type {
  StorageTier, KvCacheEvent, KvCacheEventType, StoredBlocksEvent, RemovedBlocksEvent, AllBlocksClearedEvent,
  KvEventBatch, DecodeResult, DecodeErrorKind, KvEventDecodeError,
} from './types.js';
export { STORAGE_TIERS, DECODE_ERROR_KINDS } from './types.js';
export {
  decodeKvEventBatch, parseEventFrames, readSeq, encodeSeq, normaliseHash, mediumToTier, REPLAY_END_SEQ,
} from './decode.js';
export type { SequencedPayload, FrameResult } from './decode.js';
export type { WireHash, WireEventBatch, WireArrayEvent, WireMapEvent } from './wire.js';
export { TieredPrefixIndex } from './tiered-index.js';
export { KvEventApplier, APPLY_STATUSES, isAppliedStatus } from './applier.js';
export type { ApplyStatus, KvEventApplierOptions } from './applier.js';
export { KvEventStream, SequenceCursor } from './event-stream.js';
export type { ReplaySource, ReplayReply } from './event-stream.js';
export { ZmqReplayClient } from './replay-client.js';
export type { ZmqReplayClientOptions } from './replay-client.js';
export { KvEventSubscriber } from './subscriber.js';
export type { KvEventTarget } from './subscriber.js';
export { KvEventManager } from './manager.js';
export type { KvEventManagerInit } from './manager.js';
export { ingestContext } from './options.js';
export type { IngestContext, KvEventManagerOptions, KvEventSubscriberOptions, KvEventStreamOptions } from './options.js';
export { EventLiveness } from './liveness.js';
export type { EventStatus, EventLivenessOptions } from './liveness.js';
export { KvEventCounters, combineHooks } from './stats.js';
export type {
  KvEventHooks, KvEventCountersSnapshot, SlotCounters, BatchOrigin, ReplayOutcome, ResetReason, DecodeErrorReport,
} from './stats.js';
export { dpRankEndpoint, connectEndpoint } from './endpoints.js';
