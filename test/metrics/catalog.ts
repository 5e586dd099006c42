/**
 * docs/metrics.md's table, parsed: the catalog the exported metrics and the
 * Grafana dashboard are checked against.
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

export interface DocumentedMetric {
  readonly name: string;
  readonly type: string;
  readonly labels: readonly string[];
}

/** Rows naming one kvgate_ metric; the `process_*`, `nodejs_*` row stands for prom-client's default set. */
export function documentedMetrics(): DocumentedMetric[] {
  const text = readFileSync(fileURLToPath(new URL('../../docs/metrics.md', import.meta.url)), 'utf8');
  const out: DocumentedMetric[] = [];
  for (const line of text.split('\n')) {
    const cells = line
      .split('|')
      .slice(1, -1)
      .map((c) => c.trim());
    if (cells.length !== 4) continue;
    const name = /^`(kvgate_[a-z0-9_]+)`$/.exec(cells[0]!)?.[1];
    if (name === undefined) continue;
    const labels = [...cells[2]!.matchAll(/`([a-z_]+)`/g)].map((m) => m[1]!);
    out.push({ name, type: cells[1]!, labels });
  }
  return out;
}

/** Prefixes of the Node.js process metrics exported under their standard names. */
export const STANDARD_PREFIXES = ['process_', 'nodejs_'] as const;
