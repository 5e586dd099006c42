/**
 * The report's table of what each kv policy's prefix index held (`IndexUse`, offline runs): per pool, its peak
 * bytes, the budget it was held to and the entries evicted under it. An operator sizes
 * `router_index_memory_budget_mib` from the peak of a run without one, and sees what a smaller one costs (the
 * evictions, beside the hit rate and TTFT of the policy table) from a run with it.
 */
import type { PolicySummary } from './results.js';

const MIB = 2 ** 20;

/** The table's lines (a blank line first), or none when no policy reports an index. */
export function indexUseTable(policies: Readonly<Record<string, PolicySummary>>): string[] {
  const rows = Object.entries(policies).flatMap(([name, s]) => s.prefix_index.map((ix) => ({ name, ix })));
  if (rows.length === 0) return [];
  const mib = (bytes: number): string => `${(bytes / MIB).toFixed(1)} MiB`;
  return [
    '',
    "Prefix index (kv policies; with a hybrid model's group indexes and the storage tiers beside it):",
    '',
    '| policy | pool | peak | budget | entries evicted |',
    '| --- | --- | ---: | ---: | ---: |',
    ...rows.map(
      ({ name, ix }) =>
        `| ${name} | ${ix.pool} | ${mib(ix.peak_bytes)} | ` +
        `${ix.budget_bytes === null ? 'none' : mib(ix.budget_bytes)} | ${ix.evicted_entries} |`,
    ),
    '',
    'peak = the most bytes the indexes held together, read each virtual second; with router replicas, the largest ' +
      "replica's (each holds its own, under its own budget), and the evictions of all of them.",
  ];
}
