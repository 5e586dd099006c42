/** The shape of an entry of kvgate's metric tables (definitions.ts, definitions-events.ts) and the label sets they share. */

/** One series. A `scraped` gauge is written by the scrape hooks at each scrape, never left at a stale value. */
export type MetricDefinition =
  | { kind: 'counter'; name: string; help: string; labelNames: readonly string[] }
  | { kind: 'gauge'; name: string; help: string; labelNames: readonly string[]; scraped?: true }
  | { kind: 'histogram'; name: string; help: string; labelNames: readonly string[]; buckets: readonly number[] };

/** A model's pool: the labels of most per-model series. */
export const MW = ['model', 'worker_type'] as const;
