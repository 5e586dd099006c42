/**
 * Series cardinality of a pool's KV-cache group counts: the group index and the kind's name come from the engines'
 * KV events, so they are bounded before they become label values.
 */
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { KvgateMetrics } from '../../src/metrics/index.js';
import { kvPool } from '../../src/routing/kv-pool.js';
import { makeRouterContext } from '../../src/routing/index.js';

describe('kvgate_kv_cache_group_changes_total', () => {
  it('keeps its label set bounded whatever group indexes and kinds the events announce', async () => {
    const metrics = new KvgateMetrics({ processMetrics: false });
    const ctx = makeRouterContext({ metrics, logger: pino({ level: 'silent' }) });
    const watch = { blockSizeMismatch: () => undefined, replayed: () => undefined };
    // The most groups a model may have (kv_events.max_kv_groups, whose bound is group-indexes.test.ts'): the
    // labels are bounded whatever the groups' indexes and kinds.
    const kvEvents = { maxKvGroups: 32 };
    const { events } = kvPool('aggregated', { model: 'm', blockSize: 16, kvEvents }, ctx, watch);
    const groups = events!.applier.groups!;
    groups.learn(1, { kind: 'sliding_window', slidingWindow: 128, wireKind: 'sliding_window' });
    for (let i = 0; i < 1000; i++) groups.learn(2, { kind: 'unknown', wireKind: `other_${i}` });
    // Groups 100..128 fill the model's 32 (the primary, 1 and 2 included); the rest are refused, unlabelled.
    for (let i = 0; i < 1000; i++) groups.learn(100 + i, { kind: 'unknown', wireKind: `kind_${i}` });
    const lines = (await metrics.text())
      .split('\n')
      .filter((l) => l.startsWith('kvgate_kv_cache_group_changes_total{'));
    expect(lines.sort()).toEqual([
      'kvgate_kv_cache_group_changes_total{group="1",kind="sliding:128"} 1',
      'kvgate_kv_cache_group_changes_total{group="2",kind="unknown"} 1000',
      'kvgate_kv_cache_group_changes_total{group="other",kind="unknown"} 29',
    ]);
    await events!.close();
  });
});
