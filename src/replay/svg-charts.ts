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

/** Renders a line chart as a complete SVG document. */
export function lineChart(opts: LineChartOptions): string {
  const width = opts.width ?? 760;
  const height = opts.height ?? 440;
  const legendRows = Math.ceil(opts.series.length / 3);
  const top = opts.subtitle ? 58 : 40;
  const margin = { left: 70, right: 20, top, bottom: 56 + legendRows * 18 };
  const pw = width - margin.left - margin.right;
  const ph = height - margin.top - margin.bottom;
  const xLog = opts.xLog === true;
  // A non-finite y breaks the line (a gap); other unusable points are dropped.
  const clean = opts.series.map((s) => {
    const usable = s.points.filter(([x]) => Number.isFinite(x) && (!xLog || x > 0));
    const segments: (readonly [number, number])[][] = [[]];
    for (const p of usable) {
      if (Number.isFinite(p[1])) segments[segments.length - 1]!.push(p);
      else if (segments[segments.length - 1]!.length > 0) segments.push([]);
    }
    const kept = segments.filter((g) => g.length > 0);
    const total = kept.reduce((n, g) => n + g.length, 0);
    // Thin each segment in proportion to its share of the points.
    const thinned = kept.map((g) => thin(g, Math.max(2, Math.round((MAX_POINTS_PER_SERIES * g.length) / Math.max(1, total)))));
    return { ...s, points: thinned.flat(), segments: thinned };
  });
  const xs = clean.flatMap((s) => s.points.map((p) => p[0]));
  const ys = clean.flatMap((s) => s.points.map((p) => p[1]));
  let xMin = xs.length > 0 ? Math.min(...xs) : 0;
  let xMax = xs.length > 0 ? Math.max(...xs) : 1;
  let xTicks: number[];
  if (xLog) {
    const lo = Math.floor(Math.log10(xs.length > 0 ? xMin : 1));
    const hi = Math.max(lo + 1, Math.ceil(Math.log10(xs.length > 0 ? xMax : 10)));
    xMin = 10 ** lo;
    xMax = 10 ** hi;
    xTicks = [];
    for (let k = lo; k <= hi; k++) xTicks.push(10 ** k);
  } else {
    if (xMin > 0 && xMin < (xMax - xMin) * 0.2) xMin = 0;
    if (!(xMax > xMin)) xMax = xMin + 1;
    xTicks = niceTicks(xMin, xMax);
    xMin = Math.min(xMin, xTicks[0]!);
    xMax = Math.max(xMax, xTicks[xTicks.length - 1]!);
  }
  let yMin = opts.yMin ?? Math.min(0, ...ys);
  let yMax = opts.yMax ?? (ys.length > 0 ? Math.max(...ys) : 1);
  if (!(yMax > yMin)) yMax = yMin + 1;
  const yTicks = niceTicks(yMin, yMax);
  if (opts.yMax === undefined) yMax = Math.max(yMax, yTicks[yTicks.length - 1]!);
  if (opts.yMin === undefined) yMin = Math.min(yMin, yTicks[0]!);
  const sx = (x: number): number =>
    margin.left + (xLog ? (Math.log10(x) - Math.log10(xMin)) / (Math.log10(xMax) - Math.log10(xMin)) : (x - xMin) / (xMax - xMin)) * pw;
  const sy = (y: number): number => margin.top + ph - ((Math.min(Math.max(y, yMin), yMax) - yMin) / (yMax - yMin)) * ph;
  const yFormat = opts.yFormat ?? formatTick;

  const parts: string[] = [];
  parts.push(`<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="system-ui, -apple-system, Segoe UI, Helvetica, Arial, sans-serif" font-size="12">`);
  parts.push(`<title>${escapeXml(opts.title)}</title>`);
  parts.push(`<rect width="${width}" height="${height}" fill="#ffffff"/>`);
  parts.push(`<text x="${width / 2}" y="22" text-anchor="middle" font-size="15" font-weight="600">${escapeXml(opts.title)}</text>`);
  if (opts.subtitle) parts.push(`<text x="${width / 2}" y="40" text-anchor="middle" font-size="11" fill="#555">${escapeXml(opts.subtitle)}</text>`);
  // grid and ticks
  for (const t of yTicks) {
    if (t < yMin || t > yMax) continue;
    const y = sy(t).toFixed(1);
    parts.push(`<line x1="${margin.left}" x2="${margin.left + pw}" y1="${y}" y2="${y}" stroke="#e5e5e5"/>`);
    parts.push(`<text x="${margin.left - 6}" y="${y}" text-anchor="end" dominant-baseline="middle" fill="#333">${escapeXml(yFormat(t))}</text>`);
  }
  for (const t of xTicks) {
    if (t < xMin || t > xMax) continue;
    const x = sx(t).toFixed(1);
    parts.push(`<line x1="${x}" x2="${x}" y1="${margin.top}" y2="${margin.top + ph}" stroke="#e5e5e5"/>`);
    parts.push(`<text x="${x}" y="${margin.top + ph + 16}" text-anchor="middle" fill="#333">${escapeXml(formatTick(t))}</text>`);
  }
  parts.push(`<rect x="${margin.left}" y="${margin.top}" width="${pw}" height="${ph}" fill="none" stroke="#999"/>`);
  parts.push(`<text x="${margin.left + pw / 2}" y="${margin.top + ph + 36}" text-anchor="middle">${escapeXml(opts.xLabel)}</text>`);
  parts.push(`<text transform="translate(16 ${margin.top + ph / 2}) rotate(-90)" text-anchor="middle">${escapeXml(opts.yLabel)}</text>`);
  // series
  clean.forEach((s, i) => {
    const color = s.color ?? PALETTE[i % PALETTE.length]!;
    const dash = s.dashed ? ' stroke-dasharray="6 4"' : '';
    for (const seg of s.segments) {
      const d = seg.map(([x, y]) => `${sx(x).toFixed(1)},${sy(y).toFixed(1)}`).join(' ');
      parts.push(`<polyline fill="none" stroke="${color}" stroke-width="1.8"${dash} points="${d}"><title>${escapeXml(s.name)}</title></polyline>`);
    }
  });
  // legend
  clean.forEach((s, i) => {
    const color = s.color ?? PALETTE[i % PALETTE.length]!;
    const col = i % 3;
    const row = Math.floor(i / 3);
    const x = margin.left + col * (pw / 3);
    const y = margin.top + ph + 52 + row * 18;
    const dash = s.dashed ? ' stroke-dasharray="6 4"' : '';
    parts.push(`<line x1="${x}" x2="${x + 22}" y1="${y}" y2="${y}" stroke="${color}" stroke-width="2.5"${dash}/>`);
    parts.push(`<text x="${x + 28}" y="${y}" dominant-baseline="middle">${escapeXml(s.name)}</text>`);
  });
  parts.push('</svg>');
  return `${parts.join('\n')}\n`;
}

/** An empirical CDF as chart points: (value, fraction of values <= it). */
export function cdfPoints(values: readonly number[]): [number, number][] {
  const sorted = [...values].filter(Number.isFinite).sort((a, b) => a - b);
  const n = sorted.length;
  return sorted.map((v, i) => [v, (i + 1) / n]);
}
