/**
 * docs/grafana/kvgate.json: every metric its PromQL queries name is one kvgate
 * exports (docs/metrics.md's table, or a standard process metric the default
 * registry really collects).
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { KvgateMetrics } from '../../src/metrics/index.js';
import { STANDARD_PREFIXES, documentedMetrics } from './catalog.js';

interface Panel {
  type: string;
  title?: string;
  targets?: { expr?: string; legendFormat?: string }[];
  panels?: Panel[];
}
interface Dashboard {
  schemaVersion: number;
  panels: Panel[];
  templating: { list: { name: string; type: string; query: unknown }[] };
}

const dashboard = JSON.parse(
  readFileSync(fileURLToPath(new URL('../../docs/grafana/kvgate.json', import.meta.url)), 'utf8'),
) as Dashboard;

/** PromQL words that are not metric names. */
const KEYWORDS = new Set([
  'and',
  'or',
  'unless',
  'by',
  'without',
  'on',
  'ignoring',
  'group_left',
  'group_right',
  'bool',
  'offset',
  'inf',
  'nan',
]);

/** The metric names one PromQL expression selects: functions, label matchers, ranges, grouping and strings stripped. */
function metricNames(expr: string): string[] {
  const bare = expr
    .replace(/"(?:[^"\\]|\\.)*"/g, '""')
    .replace(/\{[^}]*\}/g, ' ')
    .replace(/\[[^\]]*\]/g, ' ')
    .replace(/\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, ' ');
  const out: string[] = [];
  // A whole word (lookahead cannot backtrack into it) not followed by `(`: a function call otherwise.
  for (const m of bare.matchAll(/(?<![\w$.:])([a-zA-Z_:][a-zA-Z0-9_:]*)(?![\w:]|\s*\()/g)) {
    if (!KEYWORDS.has(m[1]!.toLowerCase())) out.push(m[1]!);
  }
  return out;
}

function queries(): string[] {
  const out: string[] = [];
  const walk = (ps: Panel[]): void => {
    for (const p of ps) {
      for (const t of p.targets ?? []) if (t.expr !== undefined) out.push(t.expr);
      walk(p.panels ?? []);
    }
  };
  walk(dashboard.panels);
  for (const v of dashboard.templating.list) {
    const q = v.query as { query?: string } | string;
    const text = typeof q === 'string' ? q : q?.query;
    const lv = text === undefined ? null : /label_values\((\w+)/.exec(text);
    if (lv !== null) out.push(lv[1]!);
  }
  return out;
}

describe('the Grafana dashboard', () => {
  it('the name extractor strips functions, matchers, ranges and grouping', () => {
    expect(
      metricNames(
        'histogram_quantile(0.99, sum by (le, model) (rate(kvgate_x_bucket{model=~"$model", a="b(c)"}[$__rate_interval])))',
      ),
    ).toEqual(['kvgate_x_bucket']);
    expect(metricNames('sum(rate(a_total[5m])) / sum(rate(b_total[5m])) and on (x) c')).toEqual([
      'a_total',
      'b_total',
      'c',
    ]);
  });

  // issue 17, what it must show item 5: the dashboard's queries name only exported metrics.
  it('names only metrics kvgate exports', async () => {
    const catalog = new Map(documentedMetrics().map((d) => [d.name, d.type]));
    const standard = new Set(
      (await new KvgateMetrics().registry.getMetricsAsJSON())
        .map((m) => m.name)
        .filter((n) => STANDARD_PREFIXES.some((p) => n.startsWith(p))),
    );
    const named = new Set(queries().flatMap(metricNames));
    const unknown: string[] = [];
    for (const raw of named) {
      const base = raw.replace(/_(bucket|sum|count)$/, '');
      const ok = catalog.get(raw) !== undefined || catalog.get(base) === 'histogram' || standard.has(raw);
      if (!ok) unknown.push(raw);
    }
    expect(unknown).toEqual([]);
    // It covers the catalog broadly, not one panel's worth.
    expect([...named].filter((n) => n.startsWith('kvgate_')).length).toBeGreaterThan(25);
  });

  it('is a Grafana dashboard with a Prometheus data-source variable and a model variable', () => {
    expect(dashboard.schemaVersion).toBeGreaterThanOrEqual(36);
    const vars = new Map(dashboard.templating.list.map((v) => [v.name, v]));
    expect(vars.get('datasource')).toMatchObject({ type: 'datasource', query: 'prometheus' });
    expect(vars.get('model')?.type).toBe('query');
    const all = JSON.stringify(dashboard.panels);
    expect(all).toContain('"uid":"${datasource}"');
    expect(all).toContain('model=~\\"$model\\"');
  });
  it('$job filters every kvgate series, not only the process panels', () => {
    // The panels' queries (the variables' label_values() name bare metrics; the $job variable lists the jobs itself).
    const panelQueries = queries().filter((q) => q.includes('('));
    const unfiltered = panelQueries
      .flatMap((q) => [...q.matchAll(/\bkvgate_[a-z0-9_]+(\{[^}]*\})?/g)])
      .filter((m) => !(m[1] ?? '').includes('job=~"$job"'))
      .map((m) => m[0]);
    expect(unfiltered).toEqual([]);
  });

  it('a panel that plots two units puts the second on a right axis with its unit', () => {
    const all = dashboard.panels as (Panel & {
      fieldConfig: {
        defaults: { unit?: string };
        overrides: { matcher: { options: string }; properties: { id: string; value: unknown }[] }[];
      };
    })[];
    const rightAxis = (p: (typeof all)[number], series: string): Record<string, unknown> =>
      Object.fromEntries(
        p.fieldConfig.overrides.find((o) => o.matcher.options === series)?.properties.map((x) => [x.id, x.value]) ?? [],
      );
    const rejections = all.find((p) => p.title?.startsWith('Rejections by error code'))!;
    expect(rejections.fieldConfig.defaults.unit).toBe('reqps');
    expect(rightAxis(rejections, 'in flight')).toMatchObject({ 'custom.axisPlacement': 'right', unit: 'short' });
    // The prediction panel plots the error it names, in tokens on its own axis.
    const prediction = all.find((p) => p.title?.includes('error p50'))!;
    const error = prediction.targets!.find((t) => t.expr!.includes('kvgate_router_prediction_error_tokens_bucket'));
    expect(error?.legendFormat).toBe('error p50 (tokens)');
    expect(rightAxis(prediction, 'error p50 (tokens)')).toMatchObject({
      'custom.axisPlacement': 'right',
      unit: 'short',
    });
  });

  it('the prediction panel plots the exact share it names, and the load-over-cache share apart from it', () => {
    const prediction = dashboard.panels.find((p) => p.title?.startsWith('Prediction: exact share'))!;
    const legend = (l: string): string | undefined => prediction.targets!.find((t) => t.legendFormat === l)?.expr;
    // The share of predictions the engine confirmed exactly: exact outcomes over all outcomes of the same metric.
    expect(legend('exact share')).toMatch(
      /^sum\(rate\(kvgate_router_prediction_total\{[^}]*outcome="exact"\}\[[^\]]*\]\)\) \/ sum\(rate\(kvgate_router_prediction_total\{(?![^}]*outcome)[^}]*\}/,
    );
    const others = prediction.targets!.filter((t) => t.legendFormat !== 'exact share').map((t) => t.expr!);
    expect(others.filter((e) => e.includes('outcome="exact"'))).toEqual([]);
    expect(others.some((e) => e.includes('kvgate_router_non_max_overlap_selections_total'))).toBe(true);
  });
});
