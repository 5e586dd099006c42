export { Backoff } from './backoff.js';
export { BatchedFlow, batchesOf, type Batched } from './batches.js';
export { Cancellation, type CancelSignal } from './cancel.js';
export {
  jsonArrayEnds,
  jsonByteMembers,
  jsonMembers,
  jsonSplice,
  jsonTextOf,
  rememberJsonText,
  skipJsonSpace,
  withJsonMembers,
  writeJsonWith,
  type ArrayReader,
  type JsonMember,
} from './json-text.js';
export { lazyJsonObject, outlineJsonObject, type JsonOutline } from './json-lazy.js';
export { ManualClock, fmix32, seededRng, systemClock, type Clock, type Rng } from './clock.js';
export { makeContext, type Context } from './context.js';
export type {
  RouterConfigOverride,
  RoutingConstraints,
  RoutingHints,
  SessionAffinity,
  SessionHint,
  SessionPriorityOrder,
  TenantHint,
} from './hints.js';
export { defaultSessionAffinity } from './hints.js';
export { silentLogger, type Logger } from './logger.js';
export { CarvedSlabs } from './slabs.js';
export {
  blockSize,
  ENGINE_DIALECTS,
  MAX_BLOCK_SIZE,
  ROUTER_MODES,
  slotKey,
  WORKER_ROLES,
  type BlockSize,
  type EngineDialect,
  type RouterMode,
  type SimpleRouterMode,
  type WorkerPin,
  type WorkerRank,
  type WorkerRole,
} from './vocabulary.js';
export {
  errorBody,
  type ErrorBody,
  httpOrigin,
  listen,
  parseJson,
  parseJsonObject,
  readBody,
  RETRY_AFTER_STATUSES,
  sendBytes,
  sendError,
  sendJson,
  SSE_DONE,
  sseDataFrame,
  sseJsonFrame,
  whenFinished,
  whenWritable,
} from './http.js';
export { encodeSeq, REPLAY_END_SEQ } from './kv-frames.js';
export {
  clientSpan,
  inRequestSpan,
  inSpan,
  requestFailed,
  setActiveSpanAttribute,
  spanFailed,
  traceLinkOf,
  traceLogFields,
  type TraceLink,
} from './tracing.js';
export type { KvGroupSnapshot, KvSlotSnapshot, SaltRun } from './kv-snapshot.js';
export { type AgentApi, agentChat } from './agent-chat.js';
export { mayDifferInPython, pythonNumberText, pythonToolsJson, readJson } from './python-json.js';
export { INLINE_SYSTEM_OPTIONS, type InlineSystemMode, type InlineSystemOption } from './inline-system.js';
export { chatTemplateKwargsOf } from './template-kwargs.js';
export { probeInlineSystem, type InlineSystemRenderer, type InlineSystemVerdict } from './inline-system-probe.js';
export { workerEntryFile } from './worker-file.js';
