/**
 * What counting one applied KV event costs the main thread: the gateway's `onApplied` hook
 * (`kvgate_kv_events_applied_total{event_type, status}`), called once per event as a vLLM engine's stores and
 * removals arrive (three stored events to one removed, a not-found now and then). Against a plain counter
 * increment (the floor) and, with `KVG_BENCH_BASE` naming another built checkout, that checkout's hook in the
 * same run. Both hooks' `/metrics` text is checked equal after the same calls.
 *
 * Run: [KVG_BENCH_BASE=<built checkout>] node --expose-gc dist/bench/run.js routing/event-hooks
 */
import { resolve } from 'node:path';
import type { KvEventHooks } from '../../src/events/index.js';
import { KvgateMetrics } from '../../src/metrics/index.js';
import { eventHooks } from '../../src/routing/event-hooks.js';
import { ratio, timeAll, type BenchSection } from '../util.js';

export const title = "Counting an applied KV event: the gateway's onApplied hook";

/** Events a call applies: a batch's worth, so a row's time divided by it is the cost of one. */
const EVENTS = 64;
type Applied = Parameters<NonNullable<KvEventHooks['onApplied']>>;
const PATTERN: [Applied[1], Applied[2]][] = [
  ['stored', 'ok'],
  ['stored', 'ok'],
  ['stored', 'ok'],
  ['removed', 'ok'],
  ['stored', 'ok'],
  ['stored', 'ok'],
  ['removed', 'not_found'],
  ['removed', 'ok'],
];
const SLOT = { workerId: 1, dpRank: 0 };
const WATCH = { blockSizeMismatch: (): void => undefined, replayed: (): void => undefined };

type HooksOf = typeof eventHooks;

function caller(hooks: ReturnType<HooksOf>): () => void {
  const on = hooks.onApplied!;
  return () => {
    for (let i = 0; i < EVENTS; i++) {
      const [type, status] = PATTERN[i & 7]!;
      on(SLOT, type, status);
    }
  };
}

/** The applied-events family of a registry's exposition. */
async function appliedText(m: KvgateMetrics): Promise<string> {
  const text = await m.registry.metrics();
  return text
    .split('\n')
    .filter((l) => l.startsWith('kvgate_kv_events_applied_total'))
    .join('\n');
}

export async function run(): Promise<BenchSection> {
  const baseDir = process.env.KVG_BENCH_BASE;
  const base =
    baseDir === undefined || baseDir === ''
      ? undefined
      : ((await import(resolve(baseDir, 'dist/src/routing/event-hooks.js'))) as { eventHooks: HooksOf }).eventHooks;
  const ours = new KvgateMetrics({ processMetrics: false });
  const theirs = new KvgateMetrics({ processMetrics: false });
  const fns: Record<string, () => unknown> = {};
  // The floor: a count per (type, status) in a plain object, as events/stats.ts keeps its own.
  const plain: Record<string, Record<string, number>> = { stored: {}, removed: {} };
  fns['a plain counter (floor)'] = () => {
    for (let i = 0; i < EVENTS; i++) {
      const [type, status] = PATTERN[i & 7]!;
      const byStatus = plain[type]!;
      byStatus[status] = (byStatus[status] ?? 0) + 1;
    }
  };
  fns["this tree's onApplied"] = caller(eventHooks(ours, WATCH, 16));
  if (base !== undefined) fns["base's onApplied"] = caller(base(theirs, WATCH, 16));
  const rows = await timeAll(fns);
  const notes = [`${EVENTS} events a call; ns/event = the median call over its events`];
  const mine = rows.find((r) => r.name === "this tree's onApplied")!;
  for (const r of rows) {
    r.note = `${((r.p50Us * 1000) / EVENTS).toFixed(1)} ns/event`;
    if (r.name === "base's onApplied") r.note += `; ${ratio(r.p50Us, mine.p50Us)} the time of this tree's`;
  }
  if (base !== undefined) {
    // The same number of calls on both, then their exposition compared.
    const a = new KvgateMetrics({ processMetrics: false });
    const b = new KvgateMetrics({ processMetrics: false });
    const callA = caller(eventHooks(a, WATCH, 16));
    const callB = caller(base(b, WATCH, 16));
    for (let k = 0; k < 1000; k++) {
      callA();
      callB();
    }
    const same = (await appliedText(a)) === (await appliedText(b));
    notes.push(`/metrics after 64,000 events each: ${same ? 'the same' : 'DIFFERENT'} applied-event series`);
    if (!same) throw new Error('the two hooks count differently');
  }
  return { title, rows, notes };
}
