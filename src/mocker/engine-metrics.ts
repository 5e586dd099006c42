/**
 * The simulated engine's /metrics, with vLLM's metric names and labels
 * (`model_name`, `engine` = data-parallel rank), SGLang's gauges in
 * addition when imitating SGLang, and
 * `kvgate_mocker_*` series saying which timing model is in use and how often
 * it extrapolated. These are the metrics of a simulated engine, not of kvgate,
 * so they live here rather than in src/metrics. One registry per worker, so
 * several in-process engines do not collide.
 *
 * Gauges and counters are read from the engine cores at scrape time; the
 * latency histograms are observed by the HTTP layer in wall-clock seconds.
 */
import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { EngineCoreStats } from './engine-types.js';
import type { FilledMockerOptions } from './options.js';

/** vLLM's TTFT buckets (seconds). */
const TTFT_BUCKETS = [
  0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80, 160, 640, 2560,
];
const LATENCY_BUCKETS = [0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960, 1920, 7680];
const ITL_BUCKETS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80];

type StatsSource = () => readonly EngineCoreStats[];

export class EngineMetrics {
  readonly registry = new Registry();
  readonly #model: string;
  readonly #ttft: Histogram<'model_name' | 'engine'>;
  readonly #e2e: Histogram<'model_name' | 'engine'>;
  readonly #queue: Histogram<'model_name' | 'engine'>;
  readonly #itl: Histogram<'model_name' | 'engine'>;
  readonly #injectedErrors: Counter<'model_name'>;
  readonly #eventBatches: Counter<'model_name' | 'engine' | 'outcome'>;

  constructor(o: FilledMockerOptions, stats: StatsSource) {
    const reg = this.registry;
    const model = (this.#model = o.model);
    scrapedSeries(reg, model, stats);
    const labelNames = ['model_name', 'engine'] as const;
    this.#ttft = new Histogram({
      name: 'vllm:time_to_first_token_seconds',
      help: 'Histogram of time to first token in seconds.',
      labelNames,
      buckets: TTFT_BUCKETS,
      registers: [reg],
    });
    this.#e2e = new Histogram({
      name: 'vllm:e2e_request_latency_seconds',
      help: 'Histogram of end-to-end request latency in seconds.',
      labelNames,
      buckets: LATENCY_BUCKETS,
      registers: [reg],
    });
    this.#queue = new Histogram({
      name: 'vllm:request_queue_time_seconds',
      help: 'Histogram of time spent waiting in the queue in seconds.',
      labelNames,
      buckets: LATENCY_BUCKETS,
      registers: [reg],
    });
    this.#itl = new Histogram({
      name: 'vllm:inter_token_latency_seconds',
      help: 'Histogram of inter-token latency in seconds.',
      labelNames,
      buckets: ITL_BUCKETS,
      registers: [reg],
    });

    configInfo(reg, o);

    this.#injectedErrors = new Counter({
      name: 'kvgate_mocker_injected_errors_total',
      help: 'Requests failed on purpose by the error-rate fault.',
      labelNames: ['model_name'],
      registers: [reg],
    });
    this.#eventBatches = new Counter({
      name: 'kvgate_mocker_kv_event_batches_total',
      help: 'KV-event batches published (sent) or dropped by a fault.',
      labelNames: ['model_name', 'engine', 'outcome'],
      registers: [reg],
    });

    if (o.engine === 'sglang') sglangSeries(reg, model, stats);
  }

  observeFirstToken(rank: number, seconds: number, queueSeconds: number): void {
    const labels = { model_name: this.#model, engine: String(rank) };
    this.#ttft.observe(labels, seconds);
    this.#queue.observe(labels, queueSeconds);
  }

  observeInterToken(rank: number, seconds: number): void {
    this.#itl.observe({ model_name: this.#model, engine: String(rank) }, seconds);
  }

  observeFinished(rank: number, seconds: number): void {
    this.#e2e.observe({ model_name: this.#model, engine: String(rank) }, seconds);
  }

  countInjectedError(): void {
    this.#injectedErrors.inc({ model_name: this.#model });
  }

  countEventBatch(rank: number, outcome: 'sent' | 'dropped'): void {
    this.#eventBatches.inc({ model_name: this.#model, engine: String(rank), outcome });
  }

  render(): Promise<string> {
    return this.registry.metrics();
  }

  get contentType(): string {
    return this.registry.contentType;
  }
}

/** vLLM's (and kvgate_mocker_*) gauges and counters, copied from the engine cores at each scrape. */
function scrapedSeries(reg: Registry, model: string, stats: StatsSource): void {
  const labelNames = ['model_name', 'engine'] as const;
  const labels = (rank: number): { model_name: string; engine: string } => ({
    model_name: model,
    engine: String(rank),
  });
  // Values live in the engine cores; each scrape copies them in.
  const gauge = (name: string, help: string, pick: (s: EngineCoreStats) => number): void => {
    new Gauge({
      name,
      help,
      labelNames,
      registers: [reg],
      collect() {
        this.reset();
        stats().forEach((s, rank) => this.set(labels(rank), pick(s)));
      },
    });
  };
  const counter = (name: string, help: string, pick: (s: EngineCoreStats) => number): void => {
    new Counter({
      name,
      help,
      labelNames,
      registers: [reg],
      collect() {
        this.reset();
        stats().forEach((s, rank) => this.inc(labels(rank), pick(s)));
      },
    });
  };
  gauge('vllm:num_requests_running', 'Number of requests in the running batch.', (s) => s.running + s.transferring);
  gauge('vllm:num_requests_waiting', 'Number of requests waiting to be scheduled.', (s) => s.waiting);
  gauge('vllm:kv_cache_usage_perc', 'KV-cache usage: 1 means 100 percent.', (s) => s.kvUsage);
  counter('vllm:prefix_cache_queries_total', 'Prefix-cache queries, in tokens.', (s) => s.prefixQueriedTokens);
  counter('vllm:prefix_cache_hits_total', 'Prefix-cache hits, in tokens.', (s) => s.prefixHitTokens);
  counter('vllm:num_preemptions_total', 'Cumulative number of preemptions.', (s) => s.preemptions);
  counter('vllm:prompt_tokens_total', 'Prefill tokens processed.', (s) => s.promptTokens);
  counter('vllm:generation_tokens_total', 'Generation tokens processed.', (s) => s.generationTokens);
  counter('kvgate_mocker_steps_total', 'Engine steps that scheduled work.', (s) => s.steps);
  counter(
    'kvgate_mocker_timing_extrapolated_steps_total',
    'Steps whose time the perf profile had to extrapolate beyond its measured points.',
    (s) => s.extrapolatedSteps,
  );
}

/** The KV-cache configuration and the step-time model in use, as info gauges (always 1). */
function configInfo(reg: Registry, o: FilledMockerOptions): void {
  const cacheInfo = new Gauge({
    name: 'vllm:cache_config_info',
    help: 'Information of the KV-cache configuration.',
    registers: [reg],
    labelNames: ['block_size', 'num_gpu_blocks', 'enable_prefix_caching', 'cache_dtype', 'kv_cache_groups'],
  });
  cacheInfo.set(
    {
      block_size: String(o.blockSize),
      num_gpu_blocks: String(o.numGpuBlocks),
      enable_prefix_caching: 'True',
      cache_dtype: 'auto',
      // kvgate's own label: the hybrid layout of --kv-groups (the gateway's engine check reads it).
      ...(o.kvGroups !== undefined ? { kv_cache_groups: o.kvGroups } : {}),
    },
    1,
  );

  const timingLabels = { ...o.timing.info, speedup: String(o.speedup) };
  const timingInfo = new Gauge({
    name: 'kvgate_mocker_timing_model_info',
    help: 'The step-time model in use (labels), always 1.',
    labelNames: Object.keys(timingLabels),
    registers: [reg],
  });
  timingInfo.set(timingLabels, 1);
}

/** SGLang's gauges (`dp_rank` labels), when the engine imitates SGLang. */
function sglangSeries(reg: Registry, model: string, stats: StatsSource): void {
  const sg = (name: string, help: string, pick: (s: EngineCoreStats) => number): void => {
    new Gauge({
      name,
      help,
      labelNames: ['model_name', 'dp_rank'],
      registers: [reg],
      collect() {
        this.reset();
        stats().forEach((s, rank) => this.set({ model_name: model, dp_rank: String(rank) }, pick(s)));
      },
    });
  };
  sg('sglang:num_running_reqs', 'The number of running requests.', (s) => s.running + s.transferring);
  sg('sglang:num_queue_reqs', 'The number of requests in the waiting queue.', (s) => s.waiting);
  sg('sglang:token_usage', 'The token usage (fraction of KV tokens in use).', (s) => s.kvUsage);
  sg('sglang:cache_hit_rate', 'The prefix cache hit rate.', (s) =>
    s.prefixQueriedTokens > 0 ? s.prefixHitTokens / s.prefixQueriedTokens : 0,
  );
}
