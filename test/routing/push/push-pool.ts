/**
 * The pool the PushRouter tests drive: a real PushRouter (with a real KvRouter
 * in KV mode) over workers 1, 2 and 3, in front of the engine double
 * (fake-engine.ts), on a manual clock, seeded RNGs, its own metrics registry
 * and a captured log; and the readings those tests make of it (the
 * bookkeeping at zero, a metric, a leg's stream).
 */
import { expect, vi, type MockInstance } from 'vitest';
import { ManualClock, seededRng, type RouterMode, type WorkerRole } from '../../../src/common/index.js';
import type { WorkerInfo } from '../../../src/discovery/index.js';
import { KvgateError } from '../../../src/errors/index.js';
import { KvgateMetrics } from '../../../src/metrics/index.js';
import { KvRouter, PushRouter, makeRouterContext, type LegRequest } from '../../../src/routing/index.js';
import type { MigrationPolicy } from '../../../src/routing/push/migration.js';
import type { LegResponse } from '../../../src/routing/push/types.js';
import { captureWarnings } from '../../helpers/capture-log.js';
import { sampleSum } from '../../helpers/metric-sum.js';
import { FakeEngine, completionChunk, type Dispatch } from './fake-engine.js';
import { BS, MODEL, PROMPT, completionLeg } from './push-fixtures.js';

export const WORKER_IDS = [1, 2, 3];

const urlOf = (id: number): string => `http://engine-${id}.test:8000`;
export const idOf = (d: Dispatch): number => Number(/engine-(\d+)/.exec(d.url)![1]);

export function worker(id: number): WorkerInfo {
  return { id, model: MODEL, url: urlOf(id), role: 'aggregated', dialect: 'vllm', dpStart: 0, dpSize: 1 };
}

export interface Pool {
  readonly push: PushRouter;
  readonly engine: FakeEngine;
  readonly kv: KvRouter | undefined;
  readonly metrics: KvgateMetrics;
  readonly clock: ManualClock;
  readonly warnings: Record<string, unknown>[];
  readonly unreachable: number[];
  /** What outlier detection was told, in order: (worker, why it failed; undefined for an answer). */
  readonly outcomes: [number, string | undefined][];
  /** The scheduler's `free` and `markPrefillCompleted` (KV mode), called through. */
  readonly free: MockInstance;
  readonly prefillDone: MockInstance;
}

const open: PushRouter[] = [];

/** Stops every pool built since the last call (an `afterEach` of each test file). */
export function closePools(): void {
  for (const p of open.splice(0)) p.close();
}

/** `role` is the pool's router side: `decode` is how a ModelRouter builds the pool of an aggregated model. */
export function pool(
  opts: { mode?: RouterMode; maxRetries?: number; migration?: MigrationPolicy; role?: WorkerRole } = {},
): Pool {
  const mode = opts.mode ?? 'kv';
  const clock = new ManualClock(1_000);
  const metrics = new KvgateMetrics({ processMetrics: false });
  const warnings: Record<string, unknown>[] = [];
  const kv = mode === 'kv' ? new KvRouter({ blockSize: BS, clock, rng: seededRng(5) }) : undefined;
  const engine = new FakeEngine();
  const unreachable: number[] = [];
  const outcomes: [number, string | undefined][] = [];
  const ctx = makeRouterContext({ clock, rng: seededRng(7), metrics, logger: captureWarnings(warnings) });
  const push = new PushRouter(
    {
      model: MODEL,
      role: opts.role ?? 'aggregated',
      mode,
      blockSize: BS,
      kvRouter: kv,
      engine: engine.client,
      maxRetries: opts.maxRetries,
      migration: opts.migration,
      onWorkerUnreachable: (id) => unreachable.push(id),
      onDispatchOutcome: (id, error) => void outcomes.push([id, error]),
    },
    ctx,
  );
  open.push(push);
  for (const id of WORKER_IDS) push.addWorker(worker(id));
  const noop = { free: () => true, markPrefillCompleted: () => true };
  const target = kv ?? noop;
  return {
    push,
    engine,
    kv,
    metrics,
    clock,
    warnings,
    unreachable,
    outcomes,
    free: vi.spyOn(target, 'free'),
    prefillDone: vi.spyOn(target, 'markPrefillCompleted'),
  };
}

let legs = 0;

export const leg = (p: Pool, over: Partial<LegRequest> = {}) => completionLeg(`leg-${++legs}`, p.clock.now(), over);

/** Nothing booked anywhere: the pool's count, every slot's, and the scheduler's. */
export function expectIdle(p: Pool): void {
  expect(p.push.inflight).toBe(0);
  for (const id of WORKER_IDS) expect(p.push.activeRequests({ workerId: id, dpRank: 0 })).toBe(0);
  if (p.kv !== undefined) expect(p.kv.activeRequestCount).toBe(0);
}

export const count = async (p: Pool, name: string, labels: Record<string, string> = {}): Promise<number> =>
  sampleSum(await p.metrics.text(), name, labels);

export function sseOf(res: LegResponse): AsyncIterable<{ data: string }> {
  if (res.body.kind !== 'sse') throw new Error(`expected a stream, got ${res.body.kind}`);
  return res.body.events;
}

/** Reads a leg's stream to its end: the payloads, then the error it ended with (undefined when it ended cleanly). */
export async function drain(res: LegResponse): Promise<{ data: string[]; error: unknown }> {
  const data: string[] = [];
  try {
    for await (const ev of sseOf(res)) data.push(ev.data);
  } catch (err) {
    return { data, error: err };
  }
  return { data, error: undefined };
}

export const textsOf = (data: string[]): string[] =>
  data.filter((d) => d !== '[DONE]').flatMap((d) => (JSON.parse(d).choices as { text: string }[]).map((c) => c.text));

/**
 * How a dispatch ended, or a failure naming the dispatch #`n` the router should not have made: a router that
 * sends again waits on an answer that never comes, so the test fails at once instead of at its timeout.
 */
export function endedWithin(p: Pool, outcome: Promise<unknown>, n: number): Promise<unknown> {
  const extra = p.engine.call(n).then(
    (d) => new Error(`unexpected dispatch #${n} to ${d.url}`),
    () => new Promise<never>(() => undefined),
  );
  return Promise.race([outcome, extra]);
}

export const broken = (d: Dispatch): KvgateError =>
  new KvgateError('KVG_ERR_ENGINE_STREAM_BROKEN', 'the connection was reset mid-body', { ...d.context });

/** A leg dispatched and answered with a stream whose first token the client has read. */
export async function streaming(p: Pool, req: LegRequest) {
  const pending = p.push.dispatch(req);
  const d = await p.engine.call(p.engine.calls.length);
  const s = d.answerStream();
  s.send(completionChunk('a', { tokenIds: [501], promptIds: PROMPT }));
  const it = sseOf(await pending)[Symbol.asyncIterator]();
  const first = await it.next();
  expect(textsOf([first.value!.data])).toEqual(['a']);
  return { d, s, it, slot: { workerId: idOf(d), dpRank: 0 } };
}
