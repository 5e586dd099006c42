/** Shared by the KV-event stream tests: an in-memory engine with a replay buffer, and a stream wired to it. */
import { blockHashes } from '../../src/wasm/index.js';
import { ManualClock, type Logger } from '../../src/common/index.js';
import {
  EventLiveness,
  KvEventApplier,
  KvEventCounters,
  KvEventStream,
  ingestContext,
  type GapReplayReply,
  type GapReplaySource,
} from '../../src/events/index.js';
import type { KvEventStreamOptions } from '../../src/events/options.js';
import { combineHooks } from '../../src/events/stats.js';
import type { ApplyScheduler } from '../../src/events/turn-scheduler.js';
import { encodeBatch, type TestEvent } from '../helpers/zmq-publisher.js';

export const BS = 4;

/** An in-memory publisher: a replay buffer, and replies (computed when asked, like the real one) that the test releases by hand. */
export class FakeEngine implements GapReplaySource {
  readonly buffer: { seq: bigint; payload: Uint8Array }[] = [];
  readonly requests: bigint[] = [];
  /** The abort signal of each request, in order. */
  readonly signals: (AbortSignal | undefined)[] = [];
  readonly #waiting: {
    batches: { seq: bigint; payload: Uint8Array }[];
    resolve: (r: GapReplayReply) => void;
    reject: (e: Error) => void;
  }[] = [];
  seq = 0n;
  auto = true;

  batch(events: TestEvent[], dpRank = 0): { seq: bigint; payload: Uint8Array } {
    const b = { seq: this.seq++, payload: encodeBatch(events, { dpRank }) };
    this.buffer.push(b);
    return b;
  }

  replay(fromSeq: bigint, signal?: AbortSignal): Promise<GapReplayReply> {
    this.requests.push(fromSeq);
    this.signals.push(signal);
    const batches = this.buffer.filter((b) => b.seq >= fromSeq);
    if (this.auto) return Promise.resolve({ batches, errors: [] });
    return new Promise((resolve, reject) => this.#waiting.push({ batches, resolve, reject }));
  }

  get waiting(): number {
    return this.#waiting.length;
  }

  /** Releases the oldest waiting reply. */
  answer(): void {
    const w = this.#waiting.shift()!;
    w.resolve({ batches: w.batches, errors: [] });
  }

  fail(): void {
    this.#waiting.shift()!.reject(new Error('timeout'));
  }
}

export function stored(id: number, parent: number | null, tokens: number[]): TestEvent {
  const hashes = Array.from({ length: tokens.length / BS }, (_, i) => BigInt(id * 100 + i));
  return {
    type: 'stored',
    blockHashes: hashes,
    parent: parent === null ? null : BigInt(parent),
    tokens,
    blockSize: BS,
  };
}

export interface StreamSetup {
  replay?: boolean;
  maxPending?: number;
  dpRank?: number;
  logger?: Logger;
  clock?: ManualClock;
  scheduler?: ApplyScheduler;
  options?: KvEventStreamOptions;
  /** Called for every event applied (or refused), after the counters. */
  onApplied?: () => void;
}

export function setup(opts: StreamSetup = {}) {
  const engine = new FakeEngine();
  const counters = new KvEventCounters();
  const clock = opts.clock ?? new ManualClock();
  const liveness = new EventLiveness({ clock, staleAfterMs: 1000 });
  const applier = new KvEventApplier({ blockSize: BS });
  const dpRank = opts.dpRank ?? 0;
  liveness.register({ workerId: 7, dpRank });
  const stream = new KvEventStream(
    { workerId: 7, dpRank },
    ingestContext({
      applier,
      hooks: opts.onApplied === undefined ? counters : combineHooks(counters, { onApplied: opts.onApplied }),
      liveness,
      clock,
      logger: opts.logger,
      scheduler: opts.scheduler,
    }),
    opts.replay === false ? undefined : engine,
    { maxPendingBatches: opts.maxPending, ...opts.options },
  );
  const deliver = (b: { seq: bigint; payload: Uint8Array }): void => stream.onMessage(b.seq, b.payload);
  const depth = (tokens: number[]): number => {
    const ix = applier.indexes.device;
    const m = ix.findMatches(blockHashes(tokens, BS));
    const slot = ix.findSlot(7, dpRank);
    for (let i = 0; i < m.count; i++) if (m.slots[i] === slot) return m.depths[i]!;
    return 0;
  };
  return { engine, counters, liveness, applier, stream, deliver, depth, clock };
}

export const A = [1, 2, 3, 4];
export const B = [5, 6, 7, 8];
export const C = [9, 10, 11, 12];
export const D = [13, 14, 15, 16];

/** A publisher growing one chain, one block per batch: after k batches in order the chain is k deep. */
export function chain(opts: StreamSetup = {}) {
  const t = setup(opts);
  const tokens: number[] = [];
  let n = 0;
  const next = () => {
    const block = [n * 4 + 1, n * 4 + 2, n * 4 + 3, n * 4 + 4];
    const b = t.engine.batch([stored(n + 1, n === 0 ? null : n * 100, block)]);
    tokens.push(...block);
    n++;
    return b;
  };
  /** The engine's replay buffer keeps only its last `steps` batches (vLLM's buffer_steps). */
  const window = (steps: number) => t.engine.buffer.splice(0, Math.max(0, t.engine.buffer.length - steps));
  return { ...t, tokens, next, window, count: () => n };
}

/** A random u64 from a seeded generator: far ahead of any real publisher's sequence. */
export function randomSeq(rng: () => number): bigint {
  return (BigInt(Math.floor(rng() * 2 ** 32)) << 32n) | BigInt(Math.floor(rng() * 2 ** 32));
}

/** `[1.5, [], rank]` whose rank is `depth` nested arrays: a few bytes each, and `String()` of it overflows the stack. */
export function deepRankBatch(depth = 100_000): Uint8Array {
  const ts = [0xcb, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0];
  return Uint8Array.from([0x93, ...ts, 0x90, ...new Array<number>(depth).fill(0x91), 0]);
}
