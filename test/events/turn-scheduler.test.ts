// issue 13 item 5: KV events are applied in bounded slices per event-loop turn, and a full queue drops to a resync.
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/common/index.js';
import { TurnScheduler } from '../../src/events/turn-scheduler.js';
import { BS, setup, stored } from './stream-fixture.js';

/** A scheduler whose turns the test runs by hand, counting the events each turn applied. */
function manualTurns(clock: ManualClock, maxEventsPerTurn: number, maxTurnMs = 1000) {
  const queued: (() => void)[] = [];
  const scheduler = new TurnScheduler({ clock, maxEventsPerTurn, maxTurnMs, defer: (fn) => queued.push(fn) });
  return {
    scheduler,
    /** Runs one turn; false when none was scheduled. */
    turn(): boolean {
      const fn = queued.shift();
      fn?.();
      return fn !== undefined;
    },
  };
}

/** A batch of `n` stored events, each a one-block chain of its own. */
function wideBatch(first: number, n: number) {
  return Array.from({ length: n }, (_, i) =>
    stored(
      first + i,
      null,
      [first + i, 1, 2, 3].map((t) => t * 7 + 1),
    ),
  );
}

describe('TurnScheduler (issue 13 item 5)', () => {
  it('never applies more events per turn than its budget, and applies all of them eventually', () => {
    const clock = new ManualClock();
    const turns = manualTurns(clock, 100);
    let appliedThisTurn = 0;
    const perTurn: number[] = [];
    const t = setup({ clock, scheduler: turns.scheduler, onApplied: () => void appliedThisTurn++ });
    // 40 batches of 37 events (1,480 events), queued at once like a burst.
    for (let b = 0; b < 40; b++) t.deliver(t.engine.batch(wideBatch(b * 100, 37)));
    expect(t.counters.eventsTotal).toBe(0); // nothing applied inline
    while (turns.turn()) {
      perTurn.push(appliedThisTurn);
      appliedThisTurn = 0;
    }
    expect(Math.max(...perTurn)).toBeLessThanOrEqual(100);
    expect(perTurn.length).toBeGreaterThanOrEqual(15);
    expect(t.counters.snapshot().events.stored.ok).toBe(40 * 37);
    expect(t.stream.cursor).toBe(39n);
    expect(t.applier.indexes.device.blockCount(7, 0)).toBe(40 * 37);
  });

  it('stops a turn at its time budget', () => {
    const clock = new ManualClock();
    const turns = manualTurns(clock, 1_000_000, 5);
    // Each applied event "takes" 1 ms on the manual clock.
    const t = setup({ clock, scheduler: turns.scheduler, onApplied: () => clock.advance(1) });
    for (let b = 0; b < 10; b++) t.deliver(t.engine.batch(wideBatch(b * 100, 64)));
    const before = t.counters.eventsTotal;
    turns.turn();
    // The time is checked every applier slice (<= 64 events), so a turn overruns by less than one slice.
    expect(t.counters.eventsTotal - before).toBeLessThanOrEqual(64 + 5);
    while (turns.turn());
    expect(t.counters.snapshot().events.stored.ok).toBe(640);
  });

  it('reads the clock every few units: a turn of one-event batches overruns its time by at most 16 units', () => {
    const clock = new ManualClock();
    let reads = 0;
    const queued: (() => void)[] = [];
    const scheduler = new TurnScheduler({
      clock: { now: () => (reads++, clock.now()) },
      maxEventsPerTurn: 1_000_000,
      maxTurnMs: 5,
      defer: (fn) => queued.push(fn),
    });
    // Each applied event "takes" 1 ms; each batch is 2 units (the message and its one event).
    const t = setup({ clock, scheduler, onApplied: () => clock.advance(1) });
    for (let b = 0; b < 100; b++) t.deliver(t.engine.batch(wideBatch(b * 100, 1)));
    reads = 0;
    queued.shift()!();
    expect(t.counters.eventsTotal).toBeGreaterThanOrEqual(5);
    expect(t.counters.eventsTotal).toBeLessThanOrEqual(8 + 1);
    expect(reads).toBeLessThanOrEqual(3);
    for (let f = queued.shift(); f !== undefined; f = queued.shift()) f();
    expect(t.counters.snapshot().events.stored.ok).toBe(100);
  });

  it('shares a turn between flooded streams round robin', () => {
    const clock = new ManualClock();
    const turns = manualTurns(clock, 200);
    const a = setup({ clock, scheduler: turns.scheduler });
    const b = setup({ clock, scheduler: turns.scheduler });
    for (let i = 0; i < 50; i++) a.deliver(a.engine.batch(wideBatch(i * 100, 20)));
    b.deliver(b.engine.batch(wideBatch(0, 5)));
    turns.turn();
    // The small stream got its turn although the big one had 1,000 events queued.
    expect(b.counters.snapshot().events.stored.ok).toBe(5);
    expect(a.counters.eventsTotal).toBeGreaterThan(0);
    expect(a.counters.eventsTotal).toBeLessThanOrEqual(200);
  });

  it('a full queue drops the newest batches, counts and logs them, and resyncs the hole from the replay buffer', async () => {
    const clock = new ManualClock();
    const turns = manualTurns(clock, 50);
    const lines: Record<string, unknown>[] = [];
    const log = {
      warn: (o: Record<string, unknown>) => void lines.push(o),
      info: () => {},
      error: () => {},
      debug: () => {},
      child: () => log,
    } as never;
    const t = setup({ clock, scheduler: turns.scheduler, logger: log, options: { maxQueuedBatches: 10 } });
    const tokens: number[] = [];
    for (let i = 0; i < 30; i++) {
      const chunk = [i * 4 + 1, i * 4 + 2, i * 4 + 3, i * 4 + 4];
      t.deliver(t.engine.batch([stored(i + 1, i === 0 ? null : i * 100, chunk)]));
      tokens.push(...chunk);
    }
    expect(t.stream.pendingCount).toBe(10);
    expect(t.counters.snapshot().dropped.queue_full).toBe(20);
    expect(lines.some((l) => l.workerId === 7 && l.queued === 10)).toBe(true);
    while (turns.turn());
    await new Promise((r) => setImmediate(r)); // the engine's answer settles
    while (turns.turn());
    // The 20 dropped batches came back from the engine's buffer: the whole chain is indexed.
    expect(t.engine.requests).toEqual([10n]);
    expect(t.depth(tokens)).toBe(30);
    expect(t.stream.cursor).toBe(29n);
    expect(t.counters.snapshot().resets.replay_incomplete).toBe(0);
    expect(tokens.length / BS).toBe(30);
  });

  it('without a replay endpoint a full queue clears the slot and marks it approximate (stale) for a while', () => {
    const clock = new ManualClock();
    const turns = manualTurns(clock, 1000);
    const t = setup({ clock, scheduler: turns.scheduler, replay: false, options: { maxQueuedBatches: 3 } });
    for (let i = 0; i < 6; i++)
      t.deliver(t.engine.batch([stored(i + 1, null, [i * 4 + 1, i * 4 + 2, i * 4 + 3, i * 4 + 4])]));
    while (turns.turn());
    t.deliver(t.engine.batch([stored(50, null, [99, 98, 97, 96])]));
    while (turns.turn());
    const s = t.counters.snapshot();
    expect(s.dropped.queue_full).toBe(3);
    expect(s.resets.gap_without_replay).toBe(1);
    expect(t.depth([1, 2, 3, 4])).toBe(0); // cleared: the dropped batches may have removed it
    expect(t.depth([99, 98, 97, 96])).toBe(1);
    expect(t.liveness.status(7, 0)).toBe('stale');
    clock.advance(1000);
    expect(t.liveness.status(7, 0)).toBe('live');
  });
});
