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
export type { CoreRequest, KvEvent, StepResult } from './engine-types.js';
export { VirtualEngine } from './virtual-engine.js';
export type { VirtualEngineOptions, VirtualRequestListener } from './virtual-engine.js';
export {
  PolynomialTimingModel,
  ProfileTimingModel,
  loadPerfProfile,
  polynomialPrefillMs,
  polynomialDecodeMs,
  stepCostModelOf,
} from './timing.js';
export { MOCKER_DEFAULTS, CLI_PORT_DEFAULTS, resolveMockerOptions, engineCoreOptions } from './options.js';
export type { MockerInput, FilledMockerOptions } from './options.js';
export { encodeEventBatch } from './kv-events.js';
export { startMocker } from './worker.js';
export type { MockerHandle } from './handle.js';

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
