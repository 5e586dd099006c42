/**
 * Line charts as standalone SVG documents, hand-rolled (no dependency): the
 * replay's TTFT CDFs and its hit-rate and load-over-time plots. A chart is a
 * pure function of its data; the output opens in any browser.
 *
 * Axes get "nice" ticks (1, 2, 5 x 10^k), or decades on a log axis. Series
 * with more points than the plot has pixels are thinned to at most
 * MAX_POINTS_PER_SERIES points, keeping the first and last.
 */

export interface ChartSeries {
  name: string;
  /** [x, y] pairs in drawing order. A non-finite y leaves a gap in the line; a non-finite x is skipped. */
  points: readonly (readonly [number, number])[];
  dashed?: boolean;
  /** CSS colour; the palette's next colour when omitted. */
  color?: string;
}

export interface LineChartOptions {
  title: string;
  xLabel: string;
  yLabel: string;
  series: readonly ChartSeries[];
  /** Logarithmic x axis (values <= 0 are dropped). */
  xLog?: boolean;
  /** Fixed y range; from the data (starting at 0) when omitted. */
  yMin?: number;
  yMax?: number;
  /** Format of y tick labels (e.g. percentages). */
  yFormat?: (v: number) => string;
  /** Extra lines under the title (config, seed). */
  subtitle?: string;
  width?: number;
  height?: number;
}

/** Colour-blind-safe palette (Okabe-Ito), then greys. */
export const PALETTE = ['#0072B2', '#D55E00', '#009E73', '#CC79A7', '#E69F00', '#56B4E9', '#F0E442', '#000000', '#777777', '#AAAAAA'];

const MAX_POINTS_PER_SERIES = 1200;

export function escapeXml(s: string): string {
  return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
}

function fmt(v: number): string {
  return Number.isInteger(v) ? String(v) : v.toFixed(2).replace(/\.?0+$/, '');
}

/** Tick label: compact, no float noise (0.30000000000000004 -> 0.3, 12000 -> 12k). */
export function formatTick(v: number): string {
  const a = Math.abs(v);
  if (a >= 1e6) return `${fmt(+(v / 1e6).toPrecision(3))}M`;
  if (a >= 1e4) return `${fmt(+(v / 1e3).toPrecision(3))}k`;
  return fmt(+v.toPrecision(4));
}

/** Ticks at 1, 2 or 5 x 10^k spanning [lo, hi] with about `target` intervals. */
export function niceTicks(lo: number, hi: number, target = 5): number[] {
  if (!(hi > lo)) return [lo];
  const raw = (hi - lo) / target;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * mag).find((s) => s >= raw) ?? 10 * mag;
  // From the last tick at or below lo to the first at or above hi, so the ticks frame the data.
  const out: number[] = [];
  const first = Math.floor(lo / step + 1e-9);
  const last = Math.ceil(hi / step - 1e-9);
  for (let k = first; k <= last; k++) out.push(+(k * step).toPrecision(12));
  return out;
}

function thin(points: readonly (readonly [number, number])[], max: number): (readonly [number, number])[] {
  if (points.length <= max) return [...points];
  const out: (readonly [number, number])[] = [];
  const stride = (points.length - 1) / (max - 1);
  for (let i = 0; i < max; i++) out.push(points[Math.round(i * stride)]!);
  return out;
}

type Point = readonly [number, number];

/** A series ready to draw: its usable points, thinned, split into segments at gaps. */
interface DrawnSeries extends ChartSeries {
  readonly points: Point[];
  readonly segments: Point[][];
}

/** A non-finite y breaks the line (a gap); other unusable points are dropped. Each segment is thinned in proportion to its share of the points. */
function drawable(series: readonly ChartSeries[], xLog: boolean): DrawnSeries[] {
  return series.map((s) => {
    const usable = s.points.filter(([x]) => Number.isFinite(x) && (!xLog || x > 0));
    const segments: Point[][] = [[]];
    for (const p of usable) {
      if (Number.isFinite(p[1])) segments[segments.length - 1]!.push(p);
      else if (segments[segments.length - 1]!.length > 0) segments.push([]);
    }
    const kept = segments.filter((g) => g.length > 0);
    const total = kept.reduce((n, g) => n + g.length, 0);
    const thinned = kept.map((g) => thin(g, Math.max(2, Math.round((MAX_POINTS_PER_SERIES * g.length) / Math.max(1, total)))));
    return { ...s, points: thinned.flat(), segments: thinned };
  });
}

interface AxisRange {
  readonly min: number;
  readonly max: number;
  readonly ticks: number[];
}

/** The x range and ticks: decades on a log axis; else nice ticks, starting at 0 when the data nearly does. */
function xAxis(xs: readonly number[], xLog: boolean): AxisRange {
  let min = xs.length > 0 ? Math.min(...xs) : 0;
  let max = xs.length > 0 ? Math.max(...xs) : 1;
  if (xLog) {
    const lo = Math.floor(Math.log10(xs.length > 0 ? min : 1));
    const hi = Math.max(lo + 1, Math.ceil(Math.log10(xs.length > 0 ? max : 10)));
    const ticks: number[] = [];
    for (let k = lo; k <= hi; k++) ticks.push(10 ** k);
    return { min: 10 ** lo, max: 10 ** hi, ticks };
  }
  if (min > 0 && min < (max - min) * 0.2) min = 0;
  if (!(max > min)) max = min + 1;
  const ticks = niceTicks(min, max);
  return { min: Math.min(min, ticks[0]!), max: Math.max(max, ticks[ticks.length - 1]!), ticks };
}

/** The y range and ticks: the fixed bounds when given, else from the data (from 0) widened to the ticks. */
function yAxis(ys: readonly number[], opts: LineChartOptions): AxisRange {
  let min = opts.yMin ?? Math.min(0, ...ys);
  let max = opts.yMax ?? (ys.length > 0 ? Math.max(...ys) : 1);
  if (!(max > min)) max = min + 1;
  const ticks = niceTicks(min, max);
  if (opts.yMax === undefined) max = Math.max(max, ticks[ticks.length - 1]!);
  if (opts.yMin === undefined) min = Math.min(min, ticks[0]!);
  return { min, max, ticks };
}

/** The plot area in pixels and the data-to-pixel scales. */
interface Frame {
  readonly width: number;
  readonly height: number;
  readonly margin: { readonly left: number; readonly right: number; readonly top: number; readonly bottom: number };
  readonly pw: number;
  readonly ph: number;
  readonly x: AxisRange;
  readonly y: AxisRange;
  sx(x: number): number;
  sy(y: number): number;
}

function frame(opts: LineChartOptions, x: AxisRange, y: AxisRange): Frame {
  const width = opts.width ?? 760;
  const height = opts.height ?? 440;
  const legendRows = Math.ceil(opts.series.length / 3);
  const margin = { left: 70, right: 20, top: opts.subtitle ? 58 : 40, bottom: 56 + legendRows * 18 };
  const pw = width - margin.left - margin.right;
  const ph = height - margin.top - margin.bottom;
  const xLog = opts.xLog === true;
  return {
    width, height, margin, pw, ph, x, y,
    sx: (v) => margin.left + (xLog ? (Math.log10(v) - Math.log10(x.min)) / (Math.log10(x.max) - Math.log10(x.min)) : (v - x.min) / (x.max - x.min)) * pw,
    sy: (v) => margin.top + ph - ((Math.min(Math.max(v, y.min), y.max) - y.min) / (y.max - y.min)) * ph,
  };
}

/** Title, subtitle, grid, tick labels, plot border and axis labels. */
function chrome(opts: LineChartOptions, f: Frame, parts: string[]): void {
  const { width, height, margin, pw, ph } = f;
  const yFormat = opts.yFormat ?? formatTick;
  parts.push(`<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="system-ui, -apple-system, Segoe UI, Helvetica, Arial, sans-serif" font-size="12">`);
  parts.push(`<title>${escapeXml(opts.title)}</title>`);
  parts.push(`<rect width="${width}" height="${height}" fill="#ffffff"/>`);
  parts.push(`<text x="${width / 2}" y="22" text-anchor="middle" font-size="15" font-weight="600">${escapeXml(opts.title)}</text>`);
  if (opts.subtitle) parts.push(`<text x="${width / 2}" y="40" text-anchor="middle" font-size="11" fill="#555">${escapeXml(opts.subtitle)}</text>`);
  for (const t of f.y.ticks) {
    if (t < f.y.min || t > f.y.max) continue;
    const y = f.sy(t).toFixed(1);
    parts.push(`<line x1="${margin.left}" x2="${margin.left + pw}" y1="${y}" y2="${y}" stroke="#e5e5e5"/>`);
    parts.push(`<text x="${margin.left - 6}" y="${y}" text-anchor="end" dominant-baseline="middle" fill="#333">${escapeXml(yFormat(t))}</text>`);
  }
  for (const t of f.x.ticks) {
    if (t < f.x.min || t > f.x.max) continue;
    const x = f.sx(t).toFixed(1);
    parts.push(`<line x1="${x}" x2="${x}" y1="${margin.top}" y2="${margin.top + ph}" stroke="#e5e5e5"/>`);
    parts.push(`<text x="${x}" y="${margin.top + ph + 16}" text-anchor="middle" fill="#333">${escapeXml(formatTick(t))}</text>`);
  }
  parts.push(`<rect x="${margin.left}" y="${margin.top}" width="${pw}" height="${ph}" fill="none" stroke="#999"/>`);
  parts.push(`<text x="${margin.left + pw / 2}" y="${margin.top + ph + 36}" text-anchor="middle">${escapeXml(opts.xLabel)}</text>`);
  parts.push(`<text transform="translate(16 ${margin.top + ph / 2}) rotate(-90)" text-anchor="middle">${escapeXml(opts.yLabel)}</text>`);
}

/** Each series' polylines, then the legend (three per row). */
function seriesAndLegend(series: readonly DrawnSeries[], f: Frame, parts: string[]): void {
  series.forEach((s, i) => {
    const color = s.color ?? PALETTE[i % PALETTE.length]!;
    const dash = s.dashed ? ' stroke-dasharray="6 4"' : '';
    for (const seg of s.segments) {
      const d = seg.map(([x, y]) => `${f.sx(x).toFixed(1)},${f.sy(y).toFixed(1)}`).join(' ');
      parts.push(`<polyline fill="none" stroke="${color}" stroke-width="1.8"${dash} points="${d}"><title>${escapeXml(s.name)}</title></polyline>`);
    }
  });
  series.forEach((s, i) => {
    const color = s.color ?? PALETTE[i % PALETTE.length]!;
    const x = f.margin.left + (i % 3) * (f.pw / 3);
    const y = f.margin.top + f.ph + 52 + Math.floor(i / 3) * 18;
    const dash = s.dashed ? ' stroke-dasharray="6 4"' : '';
    parts.push(`<line x1="${x}" x2="${x + 22}" y1="${y}" y2="${y}" stroke="${color}" stroke-width="2.5"${dash}/>`);
    parts.push(`<text x="${x + 28}" y="${y}" dominant-baseline="middle">${escapeXml(s.name)}</text>`);
  });
}

/** Renders a line chart as a complete SVG document. */
export function lineChart(opts: LineChartOptions): string {
  const xLog = opts.xLog === true;
  const series = drawable(opts.series, xLog);
  const x = xAxis(series.flatMap((s) => s.points.map((p) => p[0])), xLog);
  const y = yAxis(series.flatMap((s) => s.points.map((p) => p[1])), opts);
  const f = frame(opts, x, y);
  const parts: string[] = [];
  chrome(opts, f, parts);
  seriesAndLegend(series, f, parts);
  parts.push('</svg>');
  return `${parts.join('\n')}\n`;
}

/** An empirical CDF as chart points: (value, fraction of values <= it). */
export function cdfPoints(values: readonly number[]): [number, number][] {
  const sorted = [...values].filter(Number.isFinite).sort((a, b) => a - b);
  const n = sorted.length;
  return sorted.map((v, i) => [v, (i + 1) / n]);
}
