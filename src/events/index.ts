/**
 * KV-event ingestion: decoding vLLM and SGLang KV-cache events from ZMQ,
 * keeping the prefix index true per (worker, dp rank) with sequence cursors,
 * replay and restart handling, and reporting which workers' events can be
 * trusted. See README.md in this folder for who owns what.
 */
export type { KvCacheEvent, StoredBlocksEvent, RemovedBlocksEvent, KvEventBatch } from './types.js';
export {
  decodeKvEventBatch,
  parseEventFrames,
  readSeq,
  encodeSeq,
  normaliseHash,
  mediumToTier,
  REPLAY_END_SEQ,
  MAX_BATCH_ELEMENTS,
} from './decode.js';
export { TieredPrefixIndex } from './tiered-index.js';
export type { SaltEvictionReport } from './salt-memory.js';
export { KvEventApplier, storedLocalHashes } from './applier.js';
export type { KvEventApplierOptions } from './applier.js';
/** The ingestion threads' hand-over (benches measure the main thread's share with it). */
export { BatchPacker } from './batch-codec.js';
export { BatchHasher } from './batch-hasher.js';
export { eachPackedBatch } from './packed-batch.js';
export { TurnScheduler } from './turn-scheduler.js';
export { KvGroupIndexes } from './group-indexes.js';
export { KvEventStream } from './event-stream.js';
export { SequenceCursor } from './sequence.js';
export type { GapReplaySource, GapReplayReply } from './gap-replay.js';
export { ZmqGapReplayClient } from './gap-replay-client.js';
export { KvEventManager } from './manager.js';
export type { IngestThreadRestartReason } from './ingest-worker.js';
export { ingestContext } from './options.js';
export type { KvEventOptions } from './options.js';
export { EventLiveness } from './liveness.js';
export { KvEventCounters } from './stats.js';
export type { KvEventHooks } from './stats.js';
export { dpRankEndpoint, connectEndpoint } from './endpoints.js';
export { KvEventTap } from './tap.js';
