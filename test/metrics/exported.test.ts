/**
 * What `/metrics` exports, scraped from a running gateway (the embedded demo:
 * real mocker engines with KV events, real routers) after one request, against
 * docs/metrics.md and the Prometheus naming conventions.
 */
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEMO_MODEL } from '../../src/cli/demo.js';
import { serve, type ServeHandle } from '../../src/cli/serve.js';
import { until } from '../helpers/until.js';
import { STANDARD_PREFIXES, documentedMetrics } from './catalog.js';

interface Scrape {
  /** Metric name -> type, from the `# TYPE` lines. */
  readonly types: Map<string, string>;
  /** Metric name -> every label-key set its samples carry (histogram `le` dropped). */
  readonly labelSets: Map<string, Set<string>>;
  /** `name` is the metric's (histogram suffixes folded), `series` the sample's own. */
  readonly samples: { name: string; series: string; labels: Record<string, string>; value: number }[];
}

function parseExposition(text: string): Scrape {
  const types = new Map<string, string>();
  const labelSets = new Map<string, Set<string>>();
  const samples: Scrape['samples'] = [];
  for (const line of text.split('\n')) {
    const t = /^# TYPE (\S+) (\S+)$/.exec(line);
    if (t !== null) types.set(t[1]!, t[2]!);
    if (line === '' || line.startsWith('#')) continue;
    const s = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)/.exec(line);
    if (s === null) throw new Error(`unparsable sample line: ${line}`);
    const labels: Record<string, string> = {};
    for (const m of (s[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[m[1]!] = m[2]!;
    const series = s[1]!;
    let name = series;
    const base = name.replace(/_(bucket|sum|count)$/, '');
    if (base !== name && types.get(base) === 'histogram') name = base;
    samples.push({ name, series, labels, value: Number(s[3]) });
    const keys = Object.keys(labels)
      .filter((k) => k !== 'le')
      .sort()
      .join(',');
    if (!labelSets.has(name)) labelSets.set(name, new Set());
    labelSets.get(name)!.add(keys);
  }
  return { types, labelSets, samples };
}

/** Unit words the naming guide replaces with base units (seconds, bytes). */
const NON_BASE_UNITS = new Set([
  'ms',
  'millis',
  'milliseconds',
  'us',
  'micros',
  'microseconds',
  'ns',
  'nanoseconds',
  'minutes',
  'hours',
  'kb',
  'mb',
  'gb',
  'kib',
  'mib',
  'gib',
  'kilobytes',
  'megabytes',
  'gigabytes',
  'percent',
]);
/** Name parts that mean a duration: the name must then end in `_seconds`. */
const TIME_WORDS = ['latency', 'duration', 'time', 'overhead', 'lag'];

/** Every way `name` (a kvgate_ metric of type `type`) breaks the naming conventions; empty when none. */
function conventionViolations(name: string, type: string): string[] {
  const out: string[] = [];
  const parts = name.split('_');
  if (!/^kvgate_[a-z0-9_]+$/.test(name)) out.push('not kvgate_ + lower snake case');
  if (parts.filter((p) => p === 'kvgate').length !== 1) out.push('more than one kvgate prefix');
  if (STANDARD_PREFIXES.some((p) => name.startsWith(`kvgate_${p}`)))
    out.push('a standard process metric under the kvgate_ prefix');
  if (parts.some((p) => NON_BASE_UNITS.has(p))) out.push('a non-base unit');
  if ((type === 'counter') !== name.endsWith('_total'))
    out.push('_total on a non-counter, or a counter without _total');
  if (name.endsWith('_info') && type !== 'gauge') out.push('_info on a non-gauge');
  if (type !== 'counter' && TIME_WORDS.some((w) => parts.includes(w)) && !name.endsWith('_seconds'))
    out.push('a duration not in _seconds');
  return out;
}

describe('/metrics', () => {
  let h: ServeHandle;
  let url: string;
  let scrape: Scrape;

  beforeAll(async () => {
    h = (await serve(['--port', '0', '--preprocess-threads', '0', '--log-level', 'silent'], {
      env: {},
      logger: pino({ level: 'silent' }),
      out: { write: () => true },
    }))!;
    url = `http://127.0.0.1:${h.gateway.addresses.public.port}`;
    // One streamed chat request with a prompt of several blocks.
    const r = await fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        model: DEMO_MODEL,
        stream: true,
        max_tokens: 8,
        messages: [{ role: 'user', content: 'Tell me about KV caches. '.repeat(40) }],
      }),
    });
    expect(r.status).toBe(200);
    await r.text();
    // The request is counted when its connection closes, which may trail the body by a tick.
    await until(async () => {
      scrape = parseExposition(await (await fetch(`${url}/metrics`)).text());
      return scrape.samples.some(
        (s) => s.name === 'kvgate_request_duration_seconds' && s.labels.endpoint === '/v1/chat/completions',
      );
    }, 'the chat request in kvgate_request_duration_seconds');
  });

  afterAll(async () => {
    await h?.stop();
  });

  // issue 17, what it must show item 3: the table in docs/metrics.md equals what /metrics exports.
  it('exports exactly the metrics docs/metrics.md lists, with their types and labels', () => {
    const docs = documentedMetrics();
    const exported = [...scrape.types.keys()].filter((n) => n.startsWith('kvgate_')).sort();
    expect(exported).toEqual(docs.map((d) => d.name).sort());
    const registry = h.gateway.server.metrics.registry;
    for (const d of docs) {
      expect(scrape.types.get(d.name), d.name).toBe(d.type);
      const documented = [...d.labels].sort().join(',');
      // Every sample carries the documented labels, and the metric declares no others (covers series not yet observed).
      for (const keys of scrape.labelSets.get(d.name) ?? []) expect(keys, d.name).toBe(documented);
      const declared = (registry.getSingleMetric(d.name) as unknown as { labelNames: string[] }).labelNames;
      expect([...declared].sort().join(','), d.name).toBe(documented);
    }
  });

  // issue 17, what it must show item 3: every name follows the Prometheus naming conventions.
  it('names follow the conventions: one kvgate_ prefix, base units, _total on counters only; process metrics under their standard names', () => {
    for (const [name, type] of scrape.types) {
      if (name.startsWith('kvgate_')) expect(conventionViolations(name, type), name).toEqual([]);
      else
        expect(
          STANDARD_PREFIXES.some((p) => name.startsWith(p)),
          name,
        ).toBe(true);
    }
    expect(scrape.types.get('process_cpu_seconds_total')).toBe('counter');
    expect(scrape.types.get('nodejs_eventloop_lag_seconds')).toBe('gauge');
    expect([...scrape.types.keys()].some((n) => n.startsWith('kvgate_process_'))).toBe(false);
  });

  it('the checker flags the names kvgate used to export', () => {
    expect(conventionViolations('kvgate_router_overhead_ms', 'histogram')).not.toEqual([]);
    expect(conventionViolations('kvgate_process_process_cpu_seconds_total', 'counter')).not.toEqual([]);
    expect(conventionViolations('kvgate_worker_active_requests_total', 'gauge')).not.toEqual([]);
    expect(conventionViolations('kvgate_router_request_duration', 'histogram')).not.toEqual([]);
  });

  // issue 17 (metrics that follow Prometheus conventions): build_info, request duration, per-worker TTFT/ITL, worker_type=aggregated.
  it('after one request: build info, request duration, per-worker TTFT and ITL, aggregated workers labelled aggregated', () => {
    const one = (name: string): Scrape['samples'] => scrape.samples.filter((s) => s.name === name);
    expect(one('kvgate_build_info')).toEqual([
      {
        name: 'kvgate_build_info',
        series: 'kvgate_build_info',
        labels: { version: expect.any(String), node_version: process.version },
        value: 1,
      },
    ]);
    expect(
      one('kvgate_request_duration_seconds').find((s) => s.labels.endpoint === '/v1/chat/completions')?.labels,
    ).toMatchObject({ model: DEMO_MODEL, status_class: '2xx' });
    for (const name of ['kvgate_router_time_to_first_token_seconds', 'kvgate_router_inter_token_latency_seconds']) {
      const count = one(name).find((s) => s.series === `${name}_count` && s.value === 1);
      expect(count?.labels, name).toMatchObject({
        model: DEMO_MODEL,
        worker_type: 'aggregated',
        worker_id: expect.stringMatching(/^[1-4]$/),
      });
    }
    const typed = scrape.samples.filter((s) => s.labels.worker_type !== undefined);
    expect(typed.length).toBeGreaterThan(0);
    expect(typed.filter((s) => s.labels.worker_type !== 'aggregated')).toEqual([]);
  });

  // issue 17: the block_hashing stage summed 0 (the frontend hashes; the router saw precomputed hashes and timed nothing).
  it('the block_hashing stage of the routing overhead measures the frontend hashing the prompt', () => {
    const sum = scrape.samples.find(
      (s) => s.series === 'kvgate_router_overhead_seconds_sum' && s.labels.stage === 'block_hashing',
    );
    expect(sum?.value).toBeGreaterThan(0);
  });
});
