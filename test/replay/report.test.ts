import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/common/index.js';
import {
  cdfPoints,
  lineChart,
  niceTicks,
  formatTick,
  ProgressBar,
  renderMarkdown,
  runReplay,
  writeReport,
  parsePolicies,
  LoadTimeline,
  HitTimeline,
  distribution,
  quantile,
  round,
  type ReplayConfig,
} from '../../src/replay/index.js';

const SMALL = new URL('../fixtures/traces/small.jsonl', import.meta.url).pathname;
const BAD = new URL('../fixtures/traces/bad-lines.jsonl', import.meta.url).pathname;
const dirs: string[] = [];
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

function config(over: Partial<ReplayConfig> = {}): ReplayConfig {
  return {
    trace: SMALL,
    traceBlockSize: 512,
    strict: false,
    workload: { speedup: 4 },
    mode: 'offline',
    policies: parsePolicies(['kv', 'round-robin']),
    topology: { kind: 'aggregated', workers: 4 },
    engine: {},
    seed: 1,
    jobs: 1,
    ...over,
  };
}

describe('statistics', () => {
  it('percentiles interpolate between ranks; empty input gives NaN', () => {
    expect(quantile([1, 2, 3, 4], 0.5)).toBe(2.5);
    expect(quantile([10], 0.99)).toBe(10);
    const d = distribution([5, 1, 3, 2, 4]);
    expect(d).toMatchObject({ count: 5, mean: 3, p50: 3, max: 5 });
    expect(d.p90).toBeCloseTo(4.6);
    expect(Number.isNaN(distribution([]).mean)).toBe(true);
  });

  it('load timeline: time-weighted means per engine and max/mean imbalance', () => {
    const t = new LoadTimeline(2, 10);
    t.set(0, 0, 2); // engine 0 carries 2 for 20 ms
    t.set(0, 20, 0);
    t.set(1, 0, 1); // engine 1 carries 1 for 40 ms
    t.set(1, 40, 0);
    const s = t.finish(40);
    expect(s.perEngineMean).toEqual([1, 1]);
    expect(s.imbalance).toBe(1);
    // Over time the ratio is 2 / 1.5 in the first 20 ms and 1 / 0.5 after.
    expect(s.imbalanceOverTime).toBeCloseTo(((4 / 3) * 60 + 2 * 20) / 80);
    expect(t.buckets().map((b) => b.perEngine)).toEqual([
      [2, 1],
      [2, 1],
      [0, 1],
      [0, 1],
    ]);
  });

  it('hit timeline: totals and a sliding window', () => {
    const h = new HitTimeline(100);
    h.record(10, 100, 50);
    h.record(250, 100, 0);
    expect(h.hitRate).toBe(0.25);
    expect(h.windowed(2)).toEqual([
      [100, 0.5],
      [200, 0.5],
      [300, 0],
    ]);
  });
});

describe('charts', () => {
  it('ticks are round numbers and labels have no float noise', () => {
    expect(niceTicks(0, 1)).toEqual([0, 0.2, 0.4, 0.6, 0.8, 1]);
    expect(niceTicks(0, 950)).toEqual([0, 200, 400, 600, 800, 1000]);
    expect(formatTick(0.30000000000000004)).toBe('0.3');
    expect(formatTick(12000)).toBe('12k');
  });

  it('a line chart is a standalone SVG with one polyline and one legend entry per series', () => {
    const svg = lineChart({
      title: 'TTFT <CDF>',
      xLabel: 'ms',
      yLabel: 'fraction',
      xLog: true,
      yMin: 0,
      yMax: 1,
      series: [
        { name: 'kv', points: cdfPoints([5, 50, 500]) },
        { name: 'rr & co', points: cdfPoints([10, 100, 0]) },
      ],
    });
    expect(svg.startsWith('<svg xmlns="http://www.w3.org/2000/svg"')).toBe(true);
    expect(svg.trim().endsWith('</svg>')).toBe(true);
    expect(svg.match(/<polyline /g)).toHaveLength(2);
    expect(svg).toContain('TTFT &lt;CDF&gt;');
    expect(svg).toContain('rr &amp; co');
    // Log axis: decades from 1, ending where the data ends (500, short of 1000); the zero value was dropped.
    for (const t of ['>1<', '>10<', '>100<']) expect(svg).toContain(t);
    expect(svg).not.toContain('>1000<');
    expect(cdfPoints([3, 1, 2])).toEqual([
      [1, 1 / 3],
      [2, 2 / 3],
      [3, 1],
    ]);
    // A NaN value breaks the line into two polylines.
    const gap = lineChart({
      title: 't',
      xLabel: 'x',
      yLabel: 'y',
      series: [
        {
          name: 's',
          points: [
            [0, 1],
            [1, 2],
            [2, Number.NaN],
            [3, 1],
            [4, 2],
          ],
        },
      ],
    });
    expect(gap.match(/<polyline /g)).toHaveLength(2);
  });
});

describe('charts legible as data (issue 17, replay charts)', () => {
  const points = (n: number, f: (i: number) => number): [number, number][] =>
    Array.from({ length: n }, (_, i) => [i, f(i)]);

  it('the x axis ends where the data ends, not at the next round tick', () => {
    const svg = lineChart({
      title: 't',
      xLabel: 'x',
      yLabel: 'y',
      series: [
        {
          name: 's',
          points: [
            [0, 0],
            [61, 1],
          ],
        },
      ],
    });
    // Plot area: 760 px wide, 70 px left margin, 20 px right: x = 61 is its right edge.
    const last = /<polyline [^>]*points="([^"]+)"/.exec(svg)![1]!.split(' ').at(-1)!;
    expect(last.split(',')[0]).toBe('740.0');
    expect(svg).not.toContain('>80<');
  });

  it('two series on the same points stay apart: own dash pattern, own markers at other places', () => {
    const same = points(200, (i) => Math.sin(i / 20));
    const svg = lineChart({
      title: 't',
      xLabel: 'x',
      yLabel: 'y',
      series: [
        { name: 'a', points: same },
        { name: 'b', points: same },
      ],
    });
    const lines = [...svg.matchAll(/<polyline [^>]*stroke="([^"]+)"[^>]*?(?: stroke-dasharray="([^"]+)")? points=/g)];
    expect(lines).toHaveLength(2);
    expect(lines[0]![1]).not.toBe(lines[1]![1]);
    expect(lines[0]![2]).not.toBe(lines[1]![2]);
    const markers = (color: string): string[] =>
      [
        ...svg.matchAll(
          new RegExp(`<path transform="translate\\(([^)]+)\\)" d="([^"]+)" fill="none" stroke="${color}"`, 'g'),
        ),
      ].map((m) => `${m[1]}|${m[2]}`);
    const a = markers(lines[0]![1]!);
    const b = markers(lines[1]![1]!);
    // Ten on the line plus one in the legend each; no marker of one hides one of the other.
    expect(a).toHaveLength(11);
    expect(b).toHaveLength(11);
    const at = (m: string): string => m.split('|')[0]!;
    expect(a.map(at).filter((p) => b.map(at).includes(p))).toEqual([]);
  });

  it('a band is a shaded polygon with its own legend entry', () => {
    const svg = lineChart({
      title: 't',
      xLabel: 'x',
      yLabel: 'y',
      series: [],
      bands: [
        {
          name: 'range',
          points: [
            [0, 1, 3],
            [1, 0, 2],
          ],
        },
      ],
    });
    expect(svg.match(/<polygon /g)).toHaveLength(1);
    expect(svg).toContain('>range</text>');
  });
});

describe('progress bar', () => {
  it('on a terminal: a bar redrawn in place, throttled, ending with a newline; --no-progress writes nothing', () => {
    const out: string[] = [];
    const sink = { write: (s: string) => out.push(s), isTTY: true };
    const clock = new ManualClock();
    const off = new ProgressBar(sink, { enabled: false, clock });
    off.start('replay', 10);
    off.update(5);
    off.end();
    expect(out).toEqual([]);
    const on = new ProgressBar(sink, { intervalMs: 100, clock });
    on.start('replay', 10);
    clock.set(50);
    on.update(3); // throttled
    clock.set(200);
    on.update(5);
    on.update(10); // the last one always draws
    on.end();
    expect(out).toHaveLength(4);
    expect(out[1]).toContain('[############------------] 50% 5/10 0.2s');
    expect(out[3]).toBe('\n');
  });

  // issue 17 ("A CLI and docs that behave"): progress when stderr is not a terminal, a line every few seconds.
  it('elsewhere (CI, scripts): a plain line every 5 s of the injected clock, plus the first and the last', () => {
    const out: string[] = [];
    const clock = new ManualClock();
    const bar = new ProgressBar({ write: (s: string) => out.push(s), isTTY: false }, { clock });
    bar.start('offline replay', 1000);
    for (let done = 1; done <= 1000; done++) {
      clock.advance(20); // 20 s in all
      bar.update(done);
    }
    bar.end();
    expect(out[0]).toBe('offline replay: 0/1000 requests (0%) after 0.0 s\n');
    // One line at 0 s, then at 5, 10 and 15 s, then the last at 20 s: no \r, each a whole line.
    expect(out).toHaveLength(5);
    expect(out[1]).toBe('offline replay: 250/1000 requests (25%) after 5.0 s, about 15 s left\n');
    expect(out[4]).toBe('offline replay: 1000/1000 requests (100%) after 20.0 s\n');
    expect(out.every((l) => !l.includes('\r') && l.endsWith('\n'))).toBe(true);
  });
});

describe('replay report', () => {
  it('records provenance, the workload figures and one summary per policy; writes JSON, Markdown and charts', async () => {
    const { report, runs } = await runReplay(config(), { command: 'kvgate replay --trace small.jsonl' });
    expect(Object.keys(report.policies)).toEqual(['kv', 'round-robin']);
    const kv = report.policies.kv!;
    for (const k of ['mean', 'p50', 'p90', 'p99'] as const) expect(typeof kv.ttft_ms[k]).toBe('number');
    expect(typeof kv.itl_ms.mean).toBe('number');
    expect(kv.hit_rate_bound).toBe(report.workload.hit_rate_bound);
    expect(report.meta).toMatchObject({
      command: 'kvgate replay --trace small.jsonl',
      seed: 1,
      kvgate_version: expect.stringMatching(/^\d+\.\d+\.\d+/),
    });
    expect(report.meta.machine.cpu_count).toBeGreaterThan(0);
    expect(report.meta.config.engine).toMatchObject({
      num_gpu_blocks: 16384,
      block_size: 16,
      timing_model: 'polynomial',
    });
    expect(report.workload).toMatchObject({ requests: 80, invalid_lines: 0, engine_block_size: 16, speedup: 4 });
    expect(report.workload.trace_sha256).toMatch(/^[0-9a-f]{64}$/);

    const md = renderMarkdown(report);
    expect(md).toMatch(/^\| kv \| /m);
    expect(md).toMatch(/^\| round-robin \| /m);
    expect(md).toContain('command: `kvgate replay --trace small.jsonl`');
    expect(md).not.toMatch(/session-start priority|sessions pinned/);
    const sessions = { ...report.meta.config, session_priority: true, session_pins: true };
    expect(renderMarkdown({ ...report, meta: { ...report.meta, config: sessions } })).toMatch(
      /^- mode offline, .*, session-start priority, sessions pinned$/m,
    );
    // Where TTFT goes: three bands covering every completed request; no request of a trace follows another.
    expect(kv.ttft_bands.map((b) => b.band)).toEqual(['slowest 1 %', 'next 9 %', 'other 90 %']);
    expect(kv.ttft_bands.reduce((n, b) => n + b.requests, 0)).toBe(kv.requests.completed);
    expect(kv.ttft_bands.every((b) => b.moved_share === null)).toBe(true);
    expect(md).toMatch(/^\| kv \| slowest 1 % \| 0 \| /m);
    expect(md).toMatch(/^\| round-robin \| other 90 % \| 72 \| /m);

    const dir = mkdtempSync(join(tmpdir(), 'kvgate-replay-'));
    dirs.push(dir);
    const files = writeReport(dir, report, runs);
    expect(readdirSync(dir).sort()).toEqual([...files].sort());
    expect(files).toEqual(
      expect.arrayContaining([
        'results.json',
        'results.md',
        'ttft-cdf.svg',
        'hit-rate-over-time.svg',
        'load-imbalance-over-time.svg',
        'engine-load-kv.svg',
        'engine-load-round-robin.svg',
      ]),
    );
    // issue 17 (replay charts): the per-engine load charts are bands on one y scale for every policy.
    const yTicks = (f: string): string[] =>
      [
        ...readFileSync(join(dir, f), 'utf8').matchAll(
          /text-anchor="end" dominant-baseline="middle" fill="#333">([^<]*)</g,
        ),
      ].map((m) => m[1]!);
    expect(yTicks('engine-load-kv.svg')).toEqual(yTicks('engine-load-round-robin.svg'));
    expect(readFileSync(join(dir, 'engine-load-kv.svg'), 'utf8').match(/<polygon /g)).toHaveLength(1);
    // Each chart over time states its sliding window, in time: the same one for both.
    const window = (f: string): string | undefined =>
      /sliding ([\d.]+ (?:s|min)) window/.exec(readFileSync(join(dir, f), 'utf8'))?.[1];
    expect(window('hit-rate-over-time.svg')).toMatch(/^[\d.]+ (s|min)$/);
    expect(window('load-imbalance-over-time.svg')).toBe(window('hit-rate-over-time.svg'));
    const json = JSON.parse(readFileSync(join(dir, 'results.json'), 'utf8')) as typeof report;
    expect(json.policies.kv!.ttft_ms).toEqual(kv.ttft_ms);
    for (const f of files.filter((x) => x.endsWith('.svg'))) {
      const svg = readFileSync(join(dir, f), 'utf8');
      const meta = /<metadata id="kvgate-replay">([^<]*)<\/metadata>/.exec(svg)?.[1] ?? '';
      const unescaped = meta
        .replace(/&quot;/g, '"')
        .replace(/&lt;/g, '<')
        .replace(/&gt;/g, '>')
        .replace(/&amp;/g, '&');
      expect(JSON.parse(unescaped)).toMatchObject({
        command: 'kvgate replay --trace small.jsonl',
        seed: 1,
        machine: report.meta.machine,
      });
    }
  });

  // issue 17 (replay charts): a window's hit rate above the "bound" came from comparing a sliding
  // window (hits counted at admission) with the whole run's figure. The bound is now windowed the same
  // way, over the same requests by arrival, and no policy's window exceeds it.
  it('the hit rate over time never exceeds the infinite-cache bound of the same window', async () => {
    const { report, runs } = await runReplay(config({ workload: { speedup: 4 } }), { command: 'x' });
    const bound = new Map(report.workload.hit_rate_bound_over_time.map(([t, v]) => [t, v]));
    expect(bound.size).toBeGreaterThan(5);
    // The whole run's figure is no bound for a window: some window of this trace reuses more.
    expect(Math.max(...bound.values())).toBeGreaterThan(report.workload.hit_rate_bound);
    for (const r of runs) {
      expect(r.hits.overTime.length).toBeGreaterThan(5);
      for (const [ms, rate] of r.hits.overTime) {
        const b = bound.get(round(ms / 1000));
        expect(b, `${r.name} at ${ms} ms`).toBeDefined();
        expect(rate, `${r.name} at ${ms} ms`).toBeLessThanOrEqual(b! + 1e-4);
      }
    }
  });

  it('keeps the valid lines of a trace with bad ones, and reports the bad ones', async () => {
    const { report } = await runReplay(config({ trace: BAD, policies: parsePolicies(['round-robin']) }), {
      command: 'x',
    });
    expect(report.workload.requests).toBe(3);
    expect(report.workload.invalid_lines).toBe(7);
    expect(report.workload.invalid_line_messages[0]).toBe('line 2: missing output_length');
    expect(report.policies['round-robin']!.requests).toEqual({ total: 3, completed: 3, failed: 0 });
    await expect(runReplay(config({ trace: BAD, strict: true }), { command: 'x' })).rejects.toThrow(/strict mode/);
  });
});

describe('where TTFT goes, on a closed-loop workload', () => {
  it("counts each turn against the engine of the turn it follows (runReplay hands the workload's order over)", async () => {
    const { report } = await runReplay(
      config({
        trace: 'agentic',
        agentic: { seed: 2, sessions: 3, sessionRatePerS: 1, apps: 1, contextLimit: 40_000, medianTurns: 5 },
        policies: parsePolicies(['round-robin']),
        topology: { kind: 'aggregated', workers: 3 },
      }),
      { command: 'kvgate replay --workload agentic' },
    );
    const rr = report.policies['round-robin']!;
    const other = rr.ttft_bands[2]!;
    // Round-robin over 3 engines sends almost every next turn elsewhere.
    expect(other.moved_share).toBeGreaterThan(0.5);
    expect(other.engine_wait_mean_ms).not.toBeNull();
    expect(other.uncached_tokens_mean).toBeGreaterThan(0);
  });
});
