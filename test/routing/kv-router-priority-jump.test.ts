/**
 * A library caller's `routing.priorityJump` is bounded by the router's `maxPriorityJump` (default 10 s, the gateway's
 * default `max_priority_jump`): a larger jump is clamped, so a request queued more than that long before a jumper
 * still leaves first. The real `KvRouter` and its queue on a manual clock: one worker, prefill-busy while one request
 * of 200 tokens prefills (threshold 1.0 × 100 batched tokens), so the others park and leave one at a time.
 */
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { ManualClock, seededRng } from '../../src/common/index.js';
import {
  KvScheduler,
  type AdmissionResult,
  type KvRouterOptions,
  type KvSchedulerOptions,
  type ScheduleOutcome,
} from '../../src/core/index.js';
import { makeRouterContext, KvRouter } from '../../src/routing/index.js';
import { kvPool } from '../../src/routing/kv-pool.js';
import { kvgateErrorOf } from '../helpers/kvgate-error.js';

const BS = 4;
const QUEUE: KvRouterOptions = { routerQueueThreshold: 1.0, useKvEvents: false };

/** Its own prompt of 200 tokens for each request, so no prefix is shared. */
const prompt = (n: number): number[] => Array.from({ length: 200 }, (_, i) => n * 1000 + i);

/** Where a request parks and in what order the parked ones leave. */
class QueueScene {
  readonly clock = new ManualClock();
  readonly order: string[] = [];
  readonly router: KvRouter;
  readonly #parked: Promise<AdmissionResult>[] = [];

  constructor(router: (clock: ManualClock) => KvRouter) {
    this.router = router(this.clock);
    this.router.addWorker(1, { maxNumBatchedTokens: 100 });
    expect(this.router.schedule({ requestId: 'busy', tokens: prompt(0) }).status).toBe('routed');
  }

  /** Parks `id` `afterSecs` after the previous arrival, with its jump. */
  park(id: string, afterSecs: number, priorityJump?: number): void {
    this.clock.advance(afterSecs * 1000);
    const outcome: ScheduleOutcome = this.router.schedule({
      requestId: id,
      tokens: prompt(this.#parked.length + 1),
      routing: priorityJump === undefined ? undefined : { priorityJump },
    });
    if (outcome.status !== 'queued') throw new Error(`${id}: expected queued, got ${outcome.status}`);
    this.#parked.push(
      outcome.ticket.admitted.then((r) => {
        expect(r.status).toBe('routed');
        this.order.push(id);
        return r;
      }),
    );
  }

  /** Releases the worker once per parked request (each admitted one prefills in turn) and returns the order. */
  async drain(): Promise<string[]> {
    let current = 'busy';
    for (let i = 0; i < this.#parked.length; i++) {
      this.router.free(current);
      await Promise.resolve();
      await Promise.resolve();
      current = this.order[this.order.length - 1]!;
    }
    await Promise.all(this.#parked);
    return this.order;
  }
}

const libraryRouter =
  (extra: Partial<KvSchedulerOptions> = {}) =>
  (clock: ManualClock): KvRouter =>
    new KvRouter({ blockSize: BS, config: QUEUE, clock, rng: seededRng(7), ...extra });

describe("KvRouter's bound on priorityJump", () => {
  it('clamps a huge jump to 10 s by default: a request queued 20 s before it still leaves first', async () => {
    const s = new QueueScene(libraryRouter());
    s.park('early', 1);
    s.park('hog', 20, 1e9);
    s.park('late', 1);
    // FCFS keys: early -1, hog min(1e9, 10) - 21 = -11, late -22.
    expect(await s.drain()).toEqual(['early', 'hog', 'late']);
    expect(s.router.maxPriorityJump).toBe(10);
  });

  it('a jump within the bound still moves a request ahead', async () => {
    const s = new QueueScene(libraryRouter());
    s.park('early', 1);
    s.park('jumper', 5, 8); // key 8 - 6 = 2, ahead of early's -1
    expect(await s.drain()).toEqual(['jumper', 'early']);
  });

  it('takes its bound from maxPriorityJump: 30 s lets that hog through, 0 turns jumps off', async () => {
    const wide = new QueueScene(libraryRouter({ maxPriorityJump: 30 }));
    wide.park('early', 1);
    wide.park('hog', 20, 1e9); // 30 - 21 = 9
    expect(await wide.drain()).toEqual(['hog', 'early']);

    const off = new QueueScene(libraryRouter({ maxPriorityJump: 0 }));
    off.park('early', 1);
    off.park('jumper', 1, 5);
    expect(await off.drain()).toEqual(['early', 'jumper']);
  });

  it('refuses a bound outside [0, 3600] seconds at construction, naming maxPriorityJump', () => {
    for (const bad of [-1, 3601, Number.NaN, Number.POSITIVE_INFINITY, '10']) {
      const err = kvgateErrorOf(() => new KvRouter({ blockSize: BS, maxPriorityJump: bad as number }));
      expect(err.code).toBe('KVG_ERR_INVALID_CONFIG');
      expect(err.detail?.field).toBe('maxPriorityJump');
      expect(err.message).toMatch(/maxPriorityJump = .*: must be a number of seconds in \[0, 3600\]/);
    }
  });

  it("the gateway's pools leave the bound to the tenant classes (up to 3600 s, already applied by the frontend)", async () => {
    const ctx = makeRouterContext({ logger: pino({ level: 'silent' }) });
    const watch = { blockSizeMismatch: () => undefined, replayed: () => undefined };
    const s = new QueueScene((clock) => {
      const pool = kvPool('aggregated', { model: 'm', blockSize: BS, routerConfig: QUEUE }, { ...ctx, clock }, watch);
      return pool.kvRouter;
    });
    s.park('early', 1);
    s.park('class-30', 20, 30); // a class with max_priority_jump: 30 lets this through
    expect(await s.drain()).toEqual(['class-30', 'early']);
    expect(s.router.maxPriorityJump).toBe(3600);
  });
});

describe("KvScheduler's queue and a jump it was not given checked", () => {
  it('keys a NaN or negative jump as no jump: requests leave in arrival order', async () => {
    const clock = new ManualClock();
    const scheduler = new KvScheduler({ blockSize: BS, config: QUEUE, clock, rng: seededRng(7) });
    scheduler.addWorker(1, { maxNumBatchedTokens: 100 });
    expect(scheduler.schedule({ requestId: 'busy', isl: 200, hashes: null }).status).toBe('routed');
    const order: string[] = [];
    const parked: Promise<unknown>[] = [];
    const jumps: [string, number | undefined][] = [
      ['first', undefined],
      ['nan', Number.NaN],
      ['negative', -5],
      ['last', undefined],
    ];
    for (const [id, priorityJump] of jumps) {
      clock.advance(1000);
      const outcome = scheduler.schedule({ requestId: id, isl: 200, hashes: null, priorityJump });
      if (outcome.status !== 'queued') throw new Error(`${id}: expected queued, got ${outcome.status}`);
      parked.push(outcome.ticket.admitted.then(() => order.push(id)));
    }
    let current = 'busy';
    for (let i = 0; i < jumps.length; i++) {
      scheduler.free(current);
      await Promise.resolve();
      await Promise.resolve();
      current = order[order.length - 1]!;
    }
    await Promise.all(parked);
    expect(order).toEqual(['first', 'nan', 'negative', 'last']);
  });
});
