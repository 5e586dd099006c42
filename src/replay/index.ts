/**
 * Replay: measure routing quality on request traces, in virtual time against
 * simulated engines (offline) or over real HTTP against mocker engines and
 * the gateway (online). See README.md ("kvgate replay") for the command.
 */
export { parseTrace, loadTrace, DEFAULT_TRACE_BLOCK_SIZE } from './trace.js';
export type { TraceRecord, TraceIssue, TraceIssueKind, LoadedTrace, TraceLoadOptions } from './trace.js';
export { TokenSynthesizer, DEFAULT_VOCAB_SIZE } from './token-synth.js';
export type { TokenSynthesizerOptions } from './token-synth.js';
export { buildWorkload, arrivalOffsets, hitRateBound, pooledLruHitRate, ARRIVAL_MODES } from './workload.js';
export type { ArrivalMode, ReplayRequest, Workload, WorkloadOptions, HitRateBound } from './workload.js';
export { parsePolicies, kvVariantName, policySeed, SimpleReplayRouter, SIMPLE_POLICIES } from './policy.js';
export type { PolicySpec, ReplayRouter, RouteRequest, RouteChoice } from './policy.js';
export { createReplayRouter, KvReplayRouter } from './routers.js';
export type { ReplayRouterContext } from './routers.js';
export { toCacheEvent } from './kv-event-bridge.js';
export { OfflineReplay, runOffline, defaultBucketMs, DISAGG_PROTOCOLS } from './offline.js';
export type { DisaggProtocol, Topology, OfflineReplayOptions } from './offline.js';
export { runOfflineJob } from './offline-job.js';
export type { OfflineJob } from './offline-job.js';
export { runReplay, runOfflineJobs, offlineJobs, replayEngineOptions } from './runner.js';
export type { ReplayConfig, ReplayHooks, ReplayMode, ReplayResult, ReplayTopology } from './runner.js';
export { summarizePolicy, newOutcome, percentiles, round } from './results.js';
export type { RequestOutcome, PolicyRun, PoolRun, HitSummary, PolicySummary, Percentiles, LegSummary } from './results.js';
export { renderMarkdown, renderCharts, writeReport, machineInfo, fileSafe } from './report.js';
export type { ReplayReport, Provenance, MachineInfo, WorkloadFigures } from './report.js';
export { lineChart, cdfPoints, niceTicks, formatTick } from './svg-charts.js';
export type { ChartSeries, LineChartOptions } from './svg-charts.js';
export { LoadTimeline, HitTimeline } from './timeline.js';
export type { LoadSummary, LoadBucket } from './timeline.js';
export { ProgressBar } from './progress.js';
export type { ProgressSink, ProgressBarOptions } from './progress.js';
export { distribution, quantile, timeWeightedMean } from './stats.js';
export type { Distribution } from './stats.js';
export { generateLoad } from './load-generator.js';
export type { LoadGeneratorOptions, LoadRun } from './load-generator.js';
