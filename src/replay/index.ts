/**
 * Replay: measure routing quality on request traces, in virtual time against
 * simulated engines (offline) or over real HTTP against mocker engines and
 * the gateway (online). See README.md ("kvgate replay") for the command.
 */
export { parseTrace, loadTrace, DEFAULT_TRACE_BLOCK_SIZE } from './trace.js';
export { TokenSynthesizer } from './token-synth.js';
export { buildWorkload, arrivalOffsets, hitRateBound, pooledLruHitRate, ARRIVAL_MODES } from './workload.js';
export type { ArrivalMode, ReplayRequest, Workload } from './workload.js';
export { agenticWorkload, AGENTIC_DEFAULTS } from './agentic.js';
export type { AgenticOptions } from './agentic.js';
export { parsePolicies, PRESET_POLICY_NAMES, routerModeOf } from './policy.js';
export type { PolicySpec } from './policy.js';
export { toCacheEvent } from './kv-event-bridge.js';
export { runOffline, defaultBucketMs } from './offline.js';
export type { Topology } from './offline.js';
export { DISAGG_PROTOCOLS } from './offline-disagg.js';
export {
  MIXED_DEFAULTS,
  disaggPolicies,
  mixedWorkload,
  renderDisaggTable,
  runDisaggScenario,
} from './disagg-policies.js';
export type { DisaggProtocol } from './offline-disagg.js';
export { runReplay, replayEngineOptions } from './runner.js';
export type { ReplayConfig, ReplayHooks, ReplayMode, ReplayTopology, ReplicaSweep } from './runner.js';
export { DEFAULT_SYNC_DELAY_MS, FRONT_DOOR_MODES } from './router-replicas.js';
export type { FrontDoorMode, ReplicaOptions } from './router-replicas.js';
export { summarizePolicy, round } from './results.js';
export type { PolicyRun, PoolRun } from './results.js';
export { renderMarkdown, writeReport } from './report.js';
export { lineChart, cdfPoints, niceTicks, formatTick } from './svg-charts.js';
export { LoadTimeline, HitTimeline, windowedImbalance } from './timeline.js';
export { ProgressBar } from './progress.js';
export { distribution, quantile } from './stats.js';
export { generateLoad } from './load-generator.js';
