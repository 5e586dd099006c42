/**
 * The streams soak's load: a seeded mix of streams (short and long, chat and
 * completions, read straight, slowly, with pauses, or left early), sent in a
 * closed loop (to find the rate the gateway sustains) or in an open loop
 * (arrivals at a set rate, whatever the answers do), and the tally of how
 * they ended.
 */
import { Agent } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Rng } from '../../src/common/index.js';
import { distribution } from '../../src/replay/index.js';
import { runStream, type Reader, type StreamEnd, type StreamResult, type StreamSpec } from './stream-client.js';

const MODEL = 'mock-model';
/** About the bytes of one token's event (chat and completions chunks are 190 to 230 bytes). */
const BYTES_PER_TOKEN = 200;
const WORDS = [
  'alpha',
  'beta',
  'gamma',
  'delta',
  'kernel',
  'cache',
  'router',
  'token',
  'block',
  'engine',
  'prefix',
  'latency',
  'stream',
];

export interface MixOptions {
  /** A stream not ended this long after its request, its planned pauses aside, is hung. */
  readonly deadlineMs: number;
}

/**
 * The mix, one spec per call: half short (16-256 tokens), half long (1,000-4,000); half chat; readers
 * 40 % straight, 20 % slow (1-3 ms every 4 KB, slower than the engine), 25 % pausing (20-200 ms every
 * 32-96 KB, and one stop of 0.5-3 s), 15 % leaving after up to half their stream. Prompts share one of
 * eight system prompts, so routing sees prefixes.
 */
export function streamMix(rng: Rng, opts: MixOptions): () => StreamSpec {
  const int = (lo: number, hi: number): number => lo + Math.floor(rng() * (hi - lo + 1));
  const words = (n: number): string =>
    Array.from({ length: n }, () => WORDS[Math.floor(rng() * WORDS.length)]).join(' ');
  const systems = Array.from({ length: 8 }, (_, i) => `System prompt ${i}: ${words(150)}`);
  let n = 0;
  return () => {
    const i = n++;
    const tokens = rng() < 0.5 ? int(16, 256) : int(1000, 4000);
    const system = systems[Math.floor(rng() * systems.length)]!;
    const user = `Story ${i}: ${words(12)}`;
    const chat = rng() < 0.5;
    const common = {
      model: MODEL,
      max_tokens: tokens,
      ignore_eos: true,
      stream: true,
      stream_options: { include_usage: true },
    };
    const body = JSON.stringify(
      chat
        ? {
            ...common,
            messages: [
              { role: 'system', content: system },
              { role: 'user', content: user },
            ],
          }
        : { ...common, prompt: `${system}\n${user}` },
    );
    const expectedBytes = tokens * BYTES_PER_TOKEN;
    const r = rng();
    const reader: Reader = r < 0.4 ? 'straight' : r < 0.6 ? 'slow' : r < 0.85 ? 'pausing' : 'leaver';
    const pace = paceOf(reader, expectedBytes, int);
    const plannedMs =
      (pace.pauseEveryBytes > 0 ? (expectedBytes / pace.pauseEveryBytes + 1) * pace.pauseMs : 0) + pace.stopMs;
    const path = chat ? '/v1/chat/completions' : '/v1/completions';
    return { path, body, tokens, reader, ...pace, deadlineMs: opts.deadlineMs + plannedMs };
  };
}

type Pace = Pick<StreamSpec, 'pauseEveryBytes' | 'pauseMs' | 'stopAtBytes' | 'stopMs' | 'leaveAtBytes'>;

/** How a reader of a stream of about `expectedBytes` reads it (`int(lo, hi)`: a seeded integer). */
function paceOf(reader: Reader, expectedBytes: number, int: (lo: number, hi: number) => number): Pace {
  const none = { pauseEveryBytes: 0, pauseMs: 0, stopAtBytes: 0, stopMs: 0, leaveAtBytes: 0 };
  switch (reader) {
    case 'straight':
      return none;
    case 'slow':
      return { ...none, pauseEveryBytes: 4096, pauseMs: int(1, 3) };
    case 'pausing':
      return {
        ...none,
        pauseEveryBytes: int(32, 96) * 1024,
        pauseMs: int(20, 200),
        stopAtBytes: int(1, expectedBytes),
        stopMs: int(500, 3000),
      };
    case 'leaver':
      return { ...none, leaveAtBytes: int(1, expectedBytes / 2) };
  }
}

interface Ended {
  readonly spec: StreamSpec;
  readonly result: StreamResult;
  /** performance.now() when it ended. */
  readonly at: number;
}

/** How the streams of one phase ended. */
export class Tally {
  readonly ended: Ended[] = [];

  add(e: Ended): void {
    this.ended.push(e);
  }

  count(end: StreamEnd): number {
    return this.ended.filter((e) => e.result.end === end).length;
  }

  /** Streams that ended (done or left) within [from, to] (performance.now). */
  servedWithin(from: number, to: number): number {
    return this.ended.filter((e) => (e.result.end === 'done' || e.result.end === 'left') && e.at >= from && e.at <= to)
      .length;
  }

  /** Counts by ending and by reader, TTFT and duration percentiles (ms), and the first failures. */
  summary(): Record<string, unknown> {
    const ends: Record<string, number> = {};
    const readers: Record<string, Record<string, number>> = {};
    for (const { spec, result } of this.ended) {
      ends[result.end] = (ends[result.end] ?? 0) + 1;
      const r = (readers[spec.reader] ??= {});
      r[result.end] = (r[result.end] ?? 0) + 1;
    }
    const ttft = distribution(this.ended.flatMap((e) => (e.result.ttftMs === undefined ? [] : [e.result.ttftMs])));
    const longStraight = this.ended.filter(
      (e) => e.result.end === 'done' && e.spec.tokens >= 1000 && e.spec.reader === 'straight',
    );
    const long = distribution(longStraight.map((e) => e.result.ms));
    const ms = (v: number): number => Math.round(v * 10) / 10;
    return {
      streams: this.ended.length,
      ends,
      readers,
      tokens: this.ended.filter((e) => e.result.end === 'done').reduce((n, e) => n + e.spec.tokens, 0),
      ttftMs: { p50: ms(ttft.p50), p99: ms(ttft.p99), max: ms(ttft.max) },
      longStraightStreamMs: { p50: ms(long.p50), p99: ms(long.p99) },
      problems: this.ended
        .filter((e) => e.result.end === 'failed' || e.result.end === 'hung')
        .slice(0, 10)
        .map((e) => ({
          end: e.result.end,
          path: e.spec.path,
          tokens: e.spec.tokens,
          reader: e.spec.reader,
          detail: e.result.detail,
        })),
    };
  }
}

/** Streams in flight against one gateway, each tallied as it ends. */
export class StreamLoad {
  readonly #base: string;
  readonly #next: () => StreamSpec;
  readonly #agent = new Agent({ keepAlive: true, maxSockets: Infinity });
  readonly #inFlight = new Set<Promise<void>>();

  constructor(base: string, next: () => StreamSpec) {
    this.#base = base;
    this.#next = next;
  }

  get inFlight(): number {
    return this.#inFlight.size;
  }

  /** Starts the next stream of the mix; it is tallied in `into` when it ends. */
  launch(into: Tally): Promise<void> {
    const spec = this.#next();
    const p = runStream(this.#base, spec, this.#agent).then((result) => {
      into.add({ spec, result, at: performance.now() });
      this.#inFlight.delete(p);
    });
    this.#inFlight.add(p);
    return p;
  }

  /** `concurrency` loops, each starting a stream as its last one ends, until `untilMs` (performance.now). */
  async closedLoop(concurrency: number, untilMs: number, into: Tally): Promise<void> {
    await Promise.all(
      Array.from({ length: concurrency }, async () => {
        while (performance.now() < untilMs) await this.launch(into);
      }),
    );
  }

  /**
   * Open loop: arrivals of a Poisson process of `perSecond` (exponential gaps from `rng`) until `untilMs`,
   * each started at its arrival time whatever the streams before it do (the wait is the arrival
   * schedule, not a synchronisation). Late arrivals (a busy event loop) start at once.
   */
  async openLoop(perSecond: number, untilMs: number, rng: Rng, into: Tally): Promise<void> {
    let at = performance.now();
    for (;;) {
      at += (-Math.log(1 - rng()) / perSecond) * 1000;
      if (at >= untilMs) return;
      const wait = at - performance.now();
      if (wait > 0) await sleep(wait);
      void this.launch(into);
    }
  }

  /** Resolves once every stream in flight has ended (each is bounded by its deadline). */
  async drain(): Promise<void> {
    while (this.#inFlight.size > 0) await Promise.all([...this.#inFlight]);
  }

  close(): void {
    this.#agent.destroy();
  }
}
