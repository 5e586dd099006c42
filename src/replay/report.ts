/**
 * A replay's report: provenance (command, config, seed, kvgate version,
 * machine), the workload's figures, and one summary per policy; rendered as
 * JSON (scripts), a Markdown table (people), and SVG charts (browsers).
 * Every file written under `--out` carries the provenance.
 */
import { createHash } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { cpus, arch, release, totalmem, type } from 'node:os';
import { join } from 'node:path';
import { singleRouterName } from './router-replicas.js';
import { cdfPoints, escapeXml, lineChart, PALETTE, type ChartBand, type ChartSeries } from './svg-charts.js';
import { WINDOW_BUCKETS, windowedImbalance, type LoadBucket } from './timeline.js';
import type { PolicyRun, PolicySummary, Percentiles } from './results.js';
import { indexUseTable } from './index-use-table.js';

export interface MachineInfo {
  os: string;
  cpus: string;
  cpu_count: number;
  memory_bytes: number;
  node: string;
}

export interface Provenance {
  command: string;
  kvgate_version: string;
  seed: number;
  /** Every resolved option of the run (engine model, topology, workload, policies). */
  config: Record<string, unknown>;
  machine: MachineInfo;
  started_at: string;
}

export interface WorkloadFigures {
  trace: string;
  trace_sha256: string | null;
  lines_read: number;
  invalid_lines: number;
  /** First invalid lines, with their line numbers and reasons. */
  invalid_line_messages: string[];
  requests: number;
  /** Valid requests left out by --skip-requests and --max-requests. */
  dropped_by_max_requests: number;
  arrival: string;
  speedup: number;
  span_s: number;
  request_rate_per_s: number;
  max_isl: number | null;
  requests_capped: number;
  tokens_removed_by_cap: number;
  trace_block_size: number;
  engine_block_size: number;
  /** Infinite shared cache, tokens at the engine block size (what hit_rate_bound is). */
  hit_rate_bound: number;
  /** The same bound over time: [s, rate] over the sliding window of the hit-rate chart, requests by arrival. */
  hit_rate_bound_over_time: [number, number][];
  /** The trace README's figure: trace blocks seen in an earlier request. */
  hit_rate_bound_trace_blocks: number;
  /** One LRU cache with every (prefill) engine's capacity pooled: a finite-cache reference, not a bound. */
  pooled_lru_hit_rate: number;
}

export interface ReplayReport {
  meta: Provenance;
  workload: WorkloadFigures;
  policies: Record<string, PolicySummary>;
}

export function machineInfo(): MachineInfo {
  const list = cpus();
  return {
    os: `${type()} ${release()} ${arch()}`,
    cpus: `${list.length} x ${list[0]?.model.trim() ?? 'unknown CPU'}`,
    cpu_count: list.length,
    memory_bytes: totalmem(),
    node: process.version,
  };
}

export function sha256(text: string | Uint8Array): string {
  return createHash('sha256').update(text).digest('hex');
}

const MAX_INVALID_LISTED = 20;
export { MAX_INVALID_LISTED };

/** A chart's window for its title: "10 s window", "1.5 min window". */
function windowLength(windowMs: number): string {
  const s = windowMs / 1000;
  return s >= 120 ? `${+(s / 60).toFixed(1)} min window` : `${+s.toFixed(s < 10 ? 1 : 0)} s window`;
}

function ms(v: number | null): string {
  if (v === null) return 'n/a';
  if (v >= 10_000) return `${(v / 1000).toFixed(1)} s`;
  if (v >= 100) return v.toFixed(0);
  return v.toFixed(1);
}

function pct(v: number): string {
  return `${(v * 100).toFixed(1)} %`;
}

function p(x: Percentiles, k: keyof Percentiles): string {
  return ms(x[k]);
}

/** The Markdown report: a header of what ran, then one row per policy (and per-leg rows for P/D). */
export function renderMarkdown(report: ReplayReport): string {
  const lines: string[] = [
    ...headerLines(report),
    '',
    ...policyTable(report),
    ...ttftBandsTable(report),
    ...legsTable(report),
    ...replicaTable(report),
    ...indexUseTable(report.policies),
  ];
  const failures = Object.entries(report.policies).filter(([, s]) => s.errors !== undefined);
  for (const [name, s] of failures)
    lines.push('', `${name}: ${s.requests.failed} failed request(s), e.g. ${s.errors![0]}`);
  lines.push(
    '',
    '<details><summary>configuration</summary>',
    '',
    '```json',
    JSON.stringify(report.meta.config, null, 2),
    '```',
    '',
    '</details>',
  );
  return `${lines.join('\n')}\n`;
}

/** The title and the bullet list of what ran: command, machine, mode, workload, caps, skipped lines, prefix reuse. */
function headerLines(report: ReplayReport): string[] {
  const w = report.workload;
  const m = report.meta;
  const lines: string[] = [];
  lines.push(`## kvgate replay: ${w.trace}`);
  lines.push('');
  lines.push(`- command: \`${m.command}\``);
  lines.push(
    `- kvgate ${m.kvgate_version}, seed ${m.seed}, ${m.machine.cpus}, ` +
      `${(m.machine.memory_bytes / 2 ** 30).toFixed(0)} GiB, Node ${m.machine.node}`,
  );
  const cfg = m.config as { mode?: string; topology?: string; session_priority?: boolean; session_pins?: boolean };
  const sessions =
    (cfg.session_priority === true ? ', session-start priority' : '') +
    (cfg.session_pins === true ? ', sessions pinned' : '');
  if (cfg.mode !== undefined) lines.push(`- mode ${cfg.mode}, ${cfg.topology ?? ''}${sessions}`);
  lines.push(
    `- workload: ${w.requests} requests over ${w.span_s.toFixed(1)} s ` +
      `(${w.request_rate_per_s.toFixed(2)} req/s; arrival ${w.arrival}, speedup ${w.speedup})` +
      (w.dropped_by_max_requests > 0
        ? `, ${w.dropped_by_max_requests} left out by --skip-requests / --max-requests`
        : ''),
  );
  if (w.max_isl !== null)
    lines.push(
      `- --max-isl ${w.max_isl}: ${w.requests_capped} prompts capped, ${w.tokens_removed_by_cap} tokens removed`,
    );
  if (w.invalid_lines > 0)
    lines.push(
      `- ${w.invalid_lines} invalid trace line(s) skipped: ` +
        `${w.invalid_line_messages.slice(0, 3).join('; ')}${w.invalid_lines > 3 ? '; ...' : ''}`,
    );
  lines.push(
    `- prefix reuse: infinite-cache bound ${pct(w.hit_rate_bound)} of prompt tokens at block size ${w.engine_block_size} ` +
      `(${pct(w.hit_rate_bound_trace_blocks)} of trace blocks); ` +
      `one pooled LRU cache of all engines' capacity would reach ${pct(w.pooled_lru_hit_rate)}`,
  );
  return lines;
}

/** The prediction-error cell: mean absolute error in tokens and the exact share, or n/a for a policy without predictions. */
function predictionError(s: PolicySummary): string {
  const e = s.prediction_error;
  return e === null
    ? 'n/a'
    : e.mean_abs_tokens === null
      ? `${pct(e.exact_fraction)} exact`
      : `${e.mean_abs_tokens.toFixed(1)} (${pct(e.exact_fraction)} exact)`;
}

/** One row per policy (latencies, throughput, hits, balance, prediction error, failures), then the table's legend. */
function policyTable(report: ReplayReport): string[] {
  const lines: string[] = [];
  lines.push(
    '| policy | TTFT mean | p50 | p90 | p99 | ITL mean | p99 | E2E mean | p99 | out tok/s | req/s | hit rate | of bound | ' +
      'load max/mean | engines busy | pred. error (tok) | failed |',
  );
  lines.push(
    '| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
  );
  for (const [name, s] of Object.entries(report.policies)) {
    const busy = s.engine_busy_fraction === null ? 'n/a' : pct(s.engine_busy_fraction);
    lines.push(
      `| ${name} | ${p(s.ttft_ms, 'mean')} | ${p(s.ttft_ms, 'p50')} | ${p(s.ttft_ms, 'p90')} | ${p(s.ttft_ms, 'p99')} | ` +
        `${p(s.itl_ms, 'mean')} | ${p(s.itl_ms, 'p99')} | ${p(s.e2e_ms, 'mean')} | ${p(s.e2e_ms, 'p99')} | ` +
        `${s.throughput_tok_s.toFixed(0)} | ${s.requests_per_s.toFixed(2)} | ` +
        `${pct(s.hit_rate)} | ${pct(s.hit_rate_vs_bound)} | ` +
        `${s.load_imbalance.toFixed(2)} | ${busy} | ${predictionError(s)} | ${s.requests.failed} |`,
    );
  }
  lines.push('');
  lines.push(
    'Times in ms unless marked. TTFT, ITL and E2E are per-request distributions; "of bound" = hit rate / infinite-cache bound; ' +
      "load max/mean = busiest engine's time-averaged in-flight requests over the mean; " +
      'engines busy = share of the run the engines spent computing steps.',
  );
  return lines;
}

/** Where each policy's TTFT goes: one row per band of its requests ranked by TTFT (ttft-bands.ts). */
function ttftBandsTable(report: ReplayReport): string[] {
  const runs = Object.entries(report.policies).filter(([, s]) => s.ttft_bands.some((b) => b.requests > 0));
  if (runs.length === 0) return [];
  const num = (v: number | null): string => (v === null ? 'n/a' : v.toFixed(0));
  const share = (v: number | null): string => (v === null ? 'n/a' : pct(v));
  const lines = [
    '',
    'Where TTFT goes (requests ranked by TTFT, slowest first):',
    '',
    '| policy | band | requests | share of TTFT | TTFT mean | engine wait mean | prompt tokens | uncached tokens | ' +
      'moved | cache shortfall (tok) |',
    '| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
  ];
  for (const [name, s] of runs)
    for (const b of s.ttft_bands)
      lines.push(
        `| ${name} | ${b.band} | ${b.requests} | ${share(b.ttft_share)} | ${ms(b.ttft_mean_ms)} | ` +
          `${ms(b.engine_wait_mean_ms)} | ${num(b.prompt_tokens_mean)} | ${num(b.uncached_tokens_mean)} | ` +
          `${share(b.moved_share)} | ${num(b.cache_shortfall_tokens_mean)} |`,
      );
  lines.push(
    '',
    'engine wait = admission by the engine - arrival; uncached = prompt - engine-reported cached tokens; ' +
      'moved = of the requests that follow one earlier request (a next turn), the share served by another engine; ' +
      "cache shortfall = the router's predicted cached tokens - the engine-reported ones (kv policies).",
  );
  return lines;
}

/** The disaggregated runs' per-leg figures (prefill, KV transfer, decode); empty when no run is disaggregated. */
function legsTable(report: ReplayReport): string[] {
  const legs = Object.entries(report.policies).filter(([, s]) => s.legs !== undefined);
  if (legs.length === 0) return [];
  const lines = [
    '',
    'Disaggregated legs (ms):',
    '',
    '| policy | prefill queue mean | prefill mean | prefill p99 | KV transfer est. mean | p99 | ' +
      'prefill done -> 1st token mean | prefill hit rate | prefill load | decode load | leases expired |',
    '| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
  ];
  for (const [name, s] of legs) {
    const l = s.legs!;
    lines.push(
      `| ${name} | ${p(l.prefill_queue_ms, 'mean')} | ${p(l.prefill_ms, 'mean')} | ${p(l.prefill_ms, 'p99')} | ` +
        `${p(l.kv_transfer_estimated_ms, 'mean')} | ` +
        `${p(l.kv_transfer_estimated_ms, 'p99')} | ${p(l.prefill_done_to_first_token_ms, 'mean')} | ` +
        `${pct(l.prefill_hit_rate)} | ${l.prefill_load_imbalance.toFixed(2)} | ${l.decode_load_imbalance.toFixed(2)} | ` +
        `${l.kv_lease_expired} |`,
    );
  }
  return lines;
}

/** Runs with router replicas against the same policy with one router: hit rate and TTFT, and their ratios. */
function replicaTable(report: ReplayReport): string[] {
  const runs = Object.entries(report.policies);
  if (!runs.some(([, s]) => s.replicas.count > 1)) return [];
  const ratio = (v: number | null, base: number | null | undefined): string =>
    v === null || base === null || base === undefined || base === 0 ? 'n/a' : (v / base).toFixed(3);
  const lines = [
    '',
    'Router replicas (ratios against the same policy with one router):',
    '',
    '| run | routers | sync | delay | front door | hit rate | vs 1 | TTFT mean | vs 1 | TTFT p99 | vs 1 | sync deliveries |',
    '| --- | ---: | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
  ];
  for (const [name, s] of runs) {
    const one = report.policies[singleRouterName(name)];
    const r = s.replicas;
    lines.push(
      `| ${name} | ${r.count} | ${r.count === 1 ? 'n/a' : r.sync ? 'on' : 'off'} | ` +
        `${r.sync_delay_ms === null ? 'n/a' : `${r.sync_delay_ms} ms`} | ` +
        `${r.front ?? 'n/a'} | ${pct(s.hit_rate)} | ${ratio(s.hit_rate, one?.hit_rate)} | ` +
        `${p(s.ttft_ms, 'mean')} | ${ratio(s.ttft_ms.mean, one?.ttft_ms.mean)} | ` +
        `${p(s.ttft_ms, 'p99')} | ${ratio(s.ttft_ms.p99, one?.ttft_ms.p99)} | ${r.sync_deliveries} |`,
    );
  }
  return lines;
}

/** Safe file-name part for a policy name (`kv[router_temperature=0.5]` -> `kv_router_temperature_0.5_`). */
function fileSafe(name: string): string {
  return name.replace(/[^A-Za-z0-9._-]+/g, '_');
}

function subtitle(report: ReplayReport): string {
  const w = report.workload;
  return (
    `${w.trace}: ${w.requests} req, speedup ${w.speedup}, ` +
    `seed ${report.meta.seed}, kvgate ${report.meta.kvgate_version}`
  );
}

/** The charts of a report, by file name. */
function renderCharts(report: ReplayReport, runs: readonly PolicyRun[]): Record<string, string> {
  const sub = subtitle(report);
  const out: Record<string, string> = {};
  const ttft: ChartSeries[] = runs.map((r) => ({
    name: r.name,
    points: cdfPoints(
      r.outcomes.filter((o) => o.firstTokenMs !== null && o.error === null).map((o) => o.firstTokenMs! - o.arrivalMs),
    ),
  }));
  out['ttft-cdf.svg'] = lineChart({
    title: 'TTFT distribution (CDF)',
    subtitle: sub,
    xLabel: 'time to first token (ms, log scale)',
    yLabel: 'fraction of requests',
    series: ttft,
    xLog: true,
    yMin: 0,
    yMax: 1,
  });
  // Every run of a report shares one bucket width (runner.ts: defaultBucketMs of the workload).
  const windowText = windowLength(WINDOW_BUCKETS * (runs[0]?.pools[0]?.bucketMs ?? 0));
  const hit: ChartSeries[] = runs.map((r) => ({
    name: r.name,
    points: r.hits.overTime.map(([t, v]) => [t / 1000, v] as [number, number]),
  }));
  // The bound in the same windows of the same requests: a window of reuse-heavy requests can sit far
  // above the whole run's figure, so a flat line at that figure is no bound for a window.
  hit.push({
    name: 'infinite-cache bound (same window)',
    points: report.workload.hit_rate_bound_over_time,
    dashed: true,
    color: '#555555',
  });
  out['hit-rate-over-time.svg'] = lineChart({
    title: `Engine prefix hit rate over time (sliding ${windowText}, requests by arrival)`,
    subtitle: sub,
    xLabel: 'arrival time (s)',
    yLabel: 'cached / prompt tokens',
    series: hit,
    yMin: 0,
    yMax: 1,
    yFormat: (v) => `${Math.round(v * 100)}%`,
  });
  const imbalance: ChartSeries[] = runs.map((r) => {
    const pool = r.pools.reduce((a, b) => (b.load.imbalance > a.load.imbalance ? b : a));
    const points = windowedImbalance(pool.buckets, pool.bucketMs);
    return { name: `${r.name}${r.pools.length > 1 ? ` (${pool.name})` : ''}`, points };
  });
  out['load-imbalance-over-time.svg'] = lineChart({
    title: `Load imbalance over time: busiest engine / mean (in-flight requests, sliding ${windowText})`,
    subtitle: sub,
    xLabel: 'time (s)',
    yLabel: 'max / mean (while engines carry at least half their mean load)',
    series: imbalance,
    yMin: 1,
  });
  Object.assign(out, engineLoadCharts(runs, sub));
  return out;
}

/**
 * Per policy (and pool), the engines' in-flight requests over time as one band, from the least to
 * the most loaded engine in each bucket, with the mean over engines: the spread is the imbalance.
 * Every chart shares one y scale, so policies compare at a glance.
 */
function engineLoadCharts(runs: readonly PolicyRun[], sub: string): Record<string, string> {
  const out: Record<string, string> = {};
  let yMax = 1;
  for (const r of runs) for (const pool of r.pools) for (const b of pool.buckets) yMax = Math.max(yMax, ...b.perEngine);
  for (const r of runs) {
    for (const pool of r.pools) {
      const x = (b: LoadBucket): number => (b.startMs + pool.bucketMs / 2) / 1000;
      const band: ChartBand = {
        name: `range over the ${pool.workerIds.length} engines (least to most loaded)`,
        color: PALETTE[0],
        points: pool.buckets.map(
          (b) => [x(b), Math.min(...b.perEngine), Math.max(...b.perEngine)] as [number, number, number],
        ),
      };
      const mean: ChartSeries = {
        name: 'mean over engines',
        color: PALETTE[0],
        points: pool.buckets.map(
          (b) => [x(b), b.perEngine.reduce((a, v) => a + v, 0) / Math.max(1, b.perEngine.length)] as [number, number],
        ),
      };
      const suffix = r.pools.length > 1 ? `-${pool.name}` : '';
      out[`engine-load-${fileSafe(r.name)}${suffix}.svg`] = lineChart({
        title: `In-flight requests per engine: ${r.name}${suffix === '' ? '' : ` (${pool.name})`}`,
        subtitle: sub,
        xLabel: 'time (s)',
        yLabel: 'in-flight requests (bucket mean)',
        series: [mean],
        bands: [band],
        yMin: 0,
        yMax,
      });
    }
  }
  return out;
}

/** Writes results.json, results.md and the charts into `dir` (created). Returns the file names. */
export function writeReport(dir: string, report: ReplayReport, runs: readonly PolicyRun[]): string[] {
  mkdirSync(dir, { recursive: true });
  const files: Record<string, string> = {
    'results.json': `${JSON.stringify(report, null, 2)}\n`,
    'results.md': renderMarkdown(report),
    ...renderCharts(report, runs),
  };
  // SVGs carry the provenance too, as JSON in a <metadata> element.
  const meta = JSON.stringify({
    command: report.meta.command,
    kvgate_version: report.meta.kvgate_version,
    seed: report.meta.seed,
    machine: report.meta.machine,
    config: report.meta.config,
  });
  const stamp = `<metadata id="kvgate-replay">${escapeXml(meta)}</metadata>`;
  for (const [name, content] of Object.entries(files)) {
    const body = name.endsWith('.svg') ? content.replace(/(<svg[^>]*>)/, (tag) => `${tag}\n${stamp}`) : content;
    writeFileSync(join(dir, name), body);
  }
  return Object.keys(files);
}
