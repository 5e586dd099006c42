/**
 * Line charts as standalone SVG documents, hand-rolled (no dependency): the
 * replay's TTFT CDFs and its hit-rate and load-over-time plots. A chart is a
 * pure function of its data; the output opens in any browser.
 *
 * Axes get "nice" ticks (1, 2, 5 x 10^k), or decades on a log axis; the x
 * axis ends where the data ends. Series with more points than the plot has
 * pixels are thinned to at most MAX_POINTS_PER_SERIES points, keeping the
 * first and last. Each series has its own colour, dash pattern and hollow
 * markers (placed at different phases per series), so two series that
 * coincide stay distinguishable. A band (a shaded range between a lower and
 * an upper line) summarises many series at once.
 */

export interface ChartSeries {
  name: string;
  /** [x, y] pairs in drawing order. A non-finite y leaves a gap in the line; a non-finite x is skipped. */
  points: readonly (readonly [number, number])[];
  /** A plain dashed line without markers (reference lines such as bounds); default: the series' own style. */
  dashed?: boolean;
  /** CSS colour; the palette's next colour when omitted. */
  color?: string;
}

/** A shaded range: at each x, from `lo` to `hi`. */
export interface ChartBand {
  name: string;
  /** [x, lo, hi] in drawing order; points with a non-finite value are skipped. */
  points: readonly (readonly [number, number, number])[];
  color?: string;
}

export interface LineChartOptions {
  title: string;
  xLabel: string;
  yLabel: string;
  series: readonly ChartSeries[];
  /** Shaded ranges, drawn under the series. */
  bands?: readonly ChartBand[];
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
export const PALETTE = [
  '#0072B2',
  '#D55E00',
  '#009E73',
  '#CC79A7',
  '#E69F00',
  '#56B4E9',
  '#F0E442',
  '#000000',
  '#777777',
  '#AAAAAA',
];

const MAX_POINTS_PER_SERIES = 1200;

/** Dash patterns by series index (the first solid); with the palette, no two series look alike. */
const DASHES = ['', '8 4', '2 3', '10 3 2 3', '5 5', '1 4', '12 4', '4 2 1 2'];

/** Hollow marker shapes by series index, as SVG path data around (0, 0). */
const MARKERS = [
  'M -3.5 0 a 3.5 3.5 0 1 0 7 0 a 3.5 3.5 0 1 0 -7 0',
  'M -3 -3 h 6 v 6 h -6 z',
  'M 0 -4 L 3.6 3 L -3.6 3 z',
  'M 0 -4.2 L 4.2 0 L 0 4.2 L -4.2 0 z',
  'M -3.5 -3.5 L 3.5 3.5 M -3.5 3.5 L 3.5 -3.5',
  'M 0 -4 L 0 4 M -4 0 L 4 0',
];

/** Markers per series along its points. */
const MARKERS_PER_SERIES = 10;

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

/**
 * A non-finite y breaks the line (a gap); other unusable points are dropped.
 * Each segment is thinned in proportion to its share of the points.
 */
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
    const thinned = kept.map((g) =>
      thin(g, Math.max(2, Math.round((MAX_POINTS_PER_SERIES * g.length) / Math.max(1, total)))),
    );
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
    return { min: 10 ** lo, max: xs.length > 0 && max > 10 ** lo ? max : 10 ** hi, ticks };
  }
  if (min > 0 && min < (max - min) * 0.2) min = 0;
  if (!(max > min)) max = min + 1;
  const ticks = niceTicks(min, max);
  // The axis ends at the last data point, not at the next round tick: no empty strip on the right.
  return { min: Math.min(min, ticks[0]!), max, ticks };
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
  const left = 70;
  const right = 20;
  const pw = width - left - right;
  const legendRows = Math.ceil((opts.series.length + (opts.bands?.length ?? 0)) / legendColumns(opts, pw));
  const margin = { left, right, top: opts.subtitle ? 58 : 40, bottom: 56 + legendRows * 18 };
  const ph = height - margin.top - margin.bottom;
  const xLog = opts.xLog === true;
  return {
    width,
    height,
    margin,
    pw,
    ph,
    x,
    y,
    sx: (v) =>
      margin.left +
      (xLog
        ? (Math.log10(v) - Math.log10(x.min)) / (Math.log10(x.max) - Math.log10(x.min))
        : (v - x.min) / (x.max - x.min)) *
        pw,
    sy: (v) => margin.top + ph - ((Math.min(Math.max(v, y.min), y.max) - y.min) / (y.max - y.min)) * ph,
  };
}

/** Legend entries per row: three, or fewer when a long name would run into the next entry. */
function legendColumns(opts: LineChartOptions, plotWidth: number): number {
  const longest = Math.max(0, ...[...opts.series, ...(opts.bands ?? [])].map((e) => e.name.length));
  // About 6.5 px per character at 12 px, plus the 28 px swatch and a gap.
  return Math.max(1, Math.min(3, Math.floor(plotWidth / (longest * 6.5 + 40))));
}

/** Title, subtitle, grid, tick labels, plot border and axis labels. */
function chrome(opts: LineChartOptions, f: Frame, parts: string[]): void {
  const { width, height, margin, pw, ph } = f;
  const yFormat = opts.yFormat ?? formatTick;
  parts.push(
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" ` +
      'font-family="system-ui, -apple-system, Segoe UI, Helvetica, Arial, sans-serif" font-size="12">',
  );
  parts.push(`<title>${escapeXml(opts.title)}</title>`);
  parts.push(`<rect width="${width}" height="${height}" fill="#ffffff"/>`);
  parts.push(
    `<text x="${width / 2}" y="22" text-anchor="middle" font-size="15" font-weight="600">${escapeXml(opts.title)}</text>`,
  );
  if (opts.subtitle)
    parts.push(
      `<text x="${width / 2}" y="40" text-anchor="middle" font-size="11" fill="#555">${escapeXml(opts.subtitle)}</text>`,
    );
  for (const t of f.y.ticks) {
    if (t < f.y.min || t > f.y.max) continue;
    const y = f.sy(t).toFixed(1);
    parts.push(`<line x1="${margin.left}" x2="${margin.left + pw}" y1="${y}" y2="${y}" stroke="#e5e5e5"/>`);
    parts.push(
      `<text x="${margin.left - 6}" y="${y}" text-anchor="end" dominant-baseline="middle" fill="#333">${escapeXml(yFormat(t))}</text>`,
    );
  }
  for (const t of f.x.ticks) {
    if (t < f.x.min || t > f.x.max) continue;
    const x = f.sx(t).toFixed(1);
    parts.push(`<line x1="${x}" x2="${x}" y1="${margin.top}" y2="${margin.top + ph}" stroke="#e5e5e5"/>`);
    parts.push(
      `<text x="${x}" y="${margin.top + ph + 16}" text-anchor="middle" fill="#333">${escapeXml(formatTick(t))}</text>`,
    );
  }
  parts.push(`<rect x="${margin.left}" y="${margin.top}" width="${pw}" height="${ph}" fill="none" stroke="#999"/>`);
  parts.push(
    `<text x="${margin.left + pw / 2}" y="${margin.top + ph + 36}" text-anchor="middle">${escapeXml(opts.xLabel)}</text>`,
  );
  parts.push(
    `<text transform="translate(16 ${margin.top + ph / 2}) rotate(-90)" text-anchor="middle">${escapeXml(opts.yLabel)}</text>`,
  );
}

interface SeriesStyle {
  readonly color: string;
  /** stroke-dasharray attribute text (with its leading space), or ''. */
  readonly dash: string;
  /** Marker path, or undefined for reference lines. */
  readonly marker: string | undefined;
}

function styleOf(s: ChartSeries, i: number): SeriesStyle {
  const color = s.color ?? PALETTE[i % PALETTE.length]!;
  if (s.dashed === true) return { color, dash: ' stroke-dasharray="6 4"', marker: undefined };
  const dash = DASHES[i % DASHES.length]!;
  return { color, dash: dash === '' ? '' : ` stroke-dasharray="${dash}"`, marker: MARKERS[i % MARKERS.length]! };
}

function markerAt(style: SeriesStyle, x: number, y: number): string {
  return (
    `<path transform="translate(${x.toFixed(1)} ${y.toFixed(1)})" d="${style.marker!}" ` +
    `fill="none" stroke="${style.color}" stroke-width="1.4"/>`
  );
}

/** Bands as shaded polygons (upper edge forward, lower edge back). */
function drawBands(bands: readonly ChartBand[], f: Frame, parts: string[]): void {
  bands.forEach((b, i) => {
    const pts = b.points.filter(([x, lo, hi]) => Number.isFinite(x) && Number.isFinite(lo) && Number.isFinite(hi));
    if (pts.length === 0) return;
    const upper = pts.map(([x, , hi]) => `${f.sx(x).toFixed(1)},${f.sy(hi).toFixed(1)}`);
    const lower = pts.map(([x, lo]) => `${f.sx(x).toFixed(1)},${f.sy(lo).toFixed(1)}`).reverse();
    parts.push(
      `<polygon fill="${b.color ?? PALETTE[i % PALETTE.length]!}" fill-opacity="0.22" stroke="none" ` +
        `points="${[...upper, ...lower].join(' ')}"><title>${escapeXml(b.name)}</title></polygon>`,
    );
  });
}

/**
 * Each series' polylines, then its markers: MARKERS_PER_SERIES along its points, shifted by a
 * fraction of the spacing per series so coinciding series do not hide each other's markers.
 */
function drawSeries(series: readonly DrawnSeries[], f: Frame, parts: string[]): void {
  series.forEach((s, i) => {
    const style = styleOf(s, i);
    for (const seg of s.segments) {
      const d = seg.map(([x, y]) => `${f.sx(x).toFixed(1)},${f.sy(y).toFixed(1)}`).join(' ');
      parts.push(
        `<polyline fill="none" stroke="${style.color}" stroke-width="1.8"${style.dash} points="${d}">` +
          `<title>${escapeXml(s.name)}</title></polyline>`,
      );
    }
    if (style.marker === undefined || s.points.length < 2) return;
    const spacing = (s.points.length - 1) / MARKERS_PER_SERIES;
    for (let k = 0; k < MARKERS_PER_SERIES; k++) {
      const [x, y] =
        s.points[Math.min(s.points.length - 1, Math.round((k + (i + 1) / (series.length + 1)) * spacing))]!;
      parts.push(markerAt(style, f.sx(x), f.sy(y)));
    }
  });
}

/** The legend, up to three entries per row: bands first, then series with their dash and marker. */
function legend(bands: readonly ChartBand[], series: readonly DrawnSeries[], f: Frame, parts: string[]): void {
  const cols = legendColumns({ title: '', xLabel: '', yLabel: '', series, bands }, f.pw);
  const at = (n: number): [number, number] => [
    f.margin.left + (n % cols) * (f.pw / cols),
    f.margin.top + f.ph + 52 + Math.floor(n / cols) * 18,
  ];
  bands.forEach((b, i) => {
    const [x, y] = at(i);
    parts.push(
      `<rect x="${x}" y="${y - 6}" width="22" height="12" fill="${b.color ?? PALETTE[i % PALETTE.length]!}" fill-opacity="0.22"/>`,
    );
    parts.push(`<text x="${x + 28}" y="${y}" dominant-baseline="middle">${escapeXml(b.name)}</text>`);
  });
  series.forEach((s, i) => {
    const style = styleOf(s, i);
    const [x, y] = at(bands.length + i);
    parts.push(
      `<line x1="${x}" x2="${x + 22}" y1="${y}" y2="${y}" stroke="${style.color}" stroke-width="2.5"${style.dash}/>`,
    );
    if (style.marker !== undefined) parts.push(markerAt(style, x + 11, y));
    parts.push(`<text x="${x + 28}" y="${y}" dominant-baseline="middle">${escapeXml(s.name)}</text>`);
  });
}

/** Renders a line chart as a complete SVG document. */
export function lineChart(opts: LineChartOptions): string {
  const xLog = opts.xLog === true;
  const series = drawable(opts.series, xLog);
  const bands = opts.bands ?? [];
  const bandXs = bands.flatMap((b) =>
    b.points.filter((p) => p.every(Number.isFinite) && (!xLog || p[0] > 0)).map((p) => p[0]),
  );
  const bandYs = bands.flatMap((b) => b.points.filter((p) => p.every(Number.isFinite)).flatMap((p) => [p[1], p[2]]));
  const x = xAxis([...series.flatMap((s) => s.points.map((p) => p[0])), ...bandXs], xLog);
  const y = yAxis([...series.flatMap((s) => s.points.map((p) => p[1])), ...bandYs], opts);
  const f = frame(opts, x, y);
  const parts: string[] = [];
  chrome(opts, f, parts);
  drawBands(bands, f, parts);
  drawSeries(series, f, parts);
  legend(bands, series, f, parts);
  parts.push('</svg>');
  return `${parts.join('\n')}\n`;
}

/** An empirical CDF as chart points: (value, fraction of values <= it). */
export function cdfPoints(values: readonly number[]): [number, number][] {
  const sorted = [...values].filter(Number.isFinite).sort((a, b) => a - b);
  const n = sorted.length;
  return sorted.map((v, i) => [v, (i + 1) / n]);
}
