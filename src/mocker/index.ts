/**
 * The mocker: a simulated vLLM/SGLang engine that speaks the real protocols
 * (OpenAI HTTP API, ZMQ KV events, both P/D handoffs), for tests, demos and
 * benchmarks without GPUs.
 *
 * In-process HTTP engine:
 *
 *   const m = await startMocker({ speedup: 10, kvEventsReplayPort: 0 });
 *   // m.url, m.kvEventsEndpoints[rank], m.replayEndpoints[rank], m.setFaults({...})
 *   await m.close();
 *
 * Virtual time (offline replay), no sockets and no sleeping:
 *
 *   const ve = createVirtualEngine({ numGpuBlocks: 4096 }, { onStep: (r, at) => applyKvEvents(r.kvEvents, at) });
 *   ve.submit({ id: 'r1', promptTokens, maxTokens: 64, seed: 1 }, arrivalMs);
 *   ve.runUntilIdle();                  // or runUntil(t) step by step across engines
 *   ve.record('r1')                     // arrival, first token, finish (virtual ms), cached tokens
 *
 * See virtual-engine.ts for driving several engines on one clock. The
 * timing model in use is `options.timing.label` (`polynomial` or
 * `profile:<name>`); engine stats count steps the profile had to extrapolate.
 */
import { fallbackTokenizer, loadTokenizer } from '../tokenizer/index.js';
import { EngineCore } from './engine.js';
import { engineCoreOptions, resolveMockerOptions, type MockerInput } from './options.js';
import { VirtualEngine, type VirtualEngineOptions } from './virtual-engine.js';

export { EngineCore } from './engine.js';
export type {
  AdmittedRequest, CoreRequest, EngineCoreOptions, EngineCoreStats, FinishedRequest, KvEvent, PullResult, StepResult, TokenOutput,
} from './engine-types.js';
export { KvBlockPool, Block } from './kv-cache.js';
export { VirtualEngine } from './virtual-engine.js';
export type { VirtualEngineOptions, VirtualRequestListener, VirtualRequestRecord } from './virtual-engine.js';
export { RealtimeEngine } from './realtime-engine.js';
export type { RealtimeEngineOptions, RequestListener } from './realtime-engine.js';
export {
  PolynomialTimingModel, ProfileTimingModel, loadPerfProfile, polynomialPrefillMs, polynomialDecodeMs, profilesDir, BUNDLED_PROFILES,
} from './timing.js';
export type { PerfProfileJson, PrefillWork, StepShape, StepTiming, TimingModel } from './timing.js';
export {
  MOCKER_DEFAULTS, CLI_PORT_DEFAULTS, DEFAULT_FAULTS, DEFAULT_KV_BYTES_PER_TOKEN, resolveMockerOptions, resolveFaults, engineCoreOptions,
} from './options.js';
export type { FaultSettings, MockerInput, MockerOptions, ResolvedMockerOptions } from './options.js';
export { encodeEventBatch, wireEvent } from './kv-events.js';
export type { EventEncodingOptions, KvEventsEncoding } from './kv-events.js';
export { KvEventPublisher } from './kv-publisher.js';
export { FaultController } from './faults.js';
export { startMocker, MockerWorker } from './worker.js';
export type { MockerEndpointInfo, MockerHandle, MockerStats } from './handle.js';

/**
 * An EngineCore configured like `startMocker` would configure rank `rank`
 * (same defaults, same validation), generating tokens from the configured
 * tokenizer's word vocabulary (the fallback tokenizer's by default).
 * @throws KvgateError KVG_ERR_INVALID_CONFIG
 */
export function createEngineCore(input: MockerInput = {}, rank = 0): EngineCore {
  const o = resolveMockerOptions(input);
  const tok = o.tokenizer === undefined ? fallbackTokenizer() : loadTokenizer(o.tokenizer);
  return new EngineCore(engineCoreOptions(o, tok.sampleVocabulary().ids, rank));
}

/** A VirtualEngine around `createEngineCore(input)`. @throws KvgateError KVG_ERR_INVALID_CONFIG */
export function createVirtualEngine(input: MockerInput = {}, opts: VirtualEngineOptions = {}): VirtualEngine {
  return new VirtualEngine(createEngineCore(input), opts);
}
