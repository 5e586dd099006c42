/**
 * A test double of the HTTP transport the push router dispatches through (`EngineClient.dispatch`): each
 * worker URL answers from a script (a stream fed as SSE bytes, a JSON answer, or a thrown transport error),
 * and every call is recorded. The router, its selectors, the KV scheduler and the guard under test are the
 * real ones; only the sockets are replaced, so bookkeeping can be asserted at every step of a leg.
 */
import { Cancellation, ManualClock, seededRng, type WorkerRank } from '../../../src/common/index.js';
import type { WorkerInfo } from '../../../src/discovery/index.js';
import { EngineEventStream, kEnd, kFail, kFeed, type EngineJsonResponse } from '../../../src/engines/engine-stream.js';
import type { EngineClient } from '../../../src/engines/index.js';
import type { KvgateError } from '../../../src/errors/index.js';
import { promptHashes } from '../../../src/wasm/index.js';
import type { LegRequest } from '../../../src/routing/push/types.js';

export type Script =
  /** Answers a stream: `chunks` are fed at once; `end: 'open'` leaves it running for the test to drive. */
  | { kind: 'stream'; chunks: string[]; end: 'done' | 'open' }
  | { kind: 'json'; json: unknown; status?: number }
  | { kind: 'throw'; error: () => unknown };

export interface Dispatched {
  readonly url: string;
  readonly path: string;
  readonly body: unknown;
  /** The stream handed back (for scripts of kind `stream`). */
  stream?: EngineEventStream;
  /** Set when the router cancelled the upstream request. */
  cancelled: boolean;
}

export class FakeEngine {
  readonly calls: Dispatched[] = [];
  readonly #scripts = new Map<string, Script>();

  script(url: string, s: Script): void {
    this.#scripts.set(url, s);
  }

  /** The transport as the router sees it (the class's shape, without its sockets). */
  get client(): EngineClient {
    return this as unknown as EngineClient;
  }

  async dispatch(url: string, path: string, body: unknown): Promise<EngineEventStream | EngineJsonResponse> {
    const call: Dispatched = { url, path, body, cancelled: false };
    this.calls.push(call);
    const s = this.#scripts.get(url);
    if (s === undefined) throw new Error(`no script for ${url}`);
    if (s.kind === 'throw') throw s.error();
    const timings = { startedAt: 0, connectMs: 0, headersMs: 0, firstByteMs: 0, firstEventMs: undefined, endMs: 0 };
    if (s.kind === 'json') {
      const text = JSON.stringify(s.json);
      return { kind: 'json', status: s.status ?? 200, headers: {}, body: Buffer.from(text), json: s.json, timings };
    }
    const stream = new EngineEventStream(
      { status: 200, headers: {}, timings, highWaterMark: 64, maxEventBytes: 1 << 20 },
      { pause: () => undefined, resume: () => undefined, cancel: () => (call.cancelled = true) },
    );
    call.stream = stream;
    if (s.chunks.length > 0) stream[kFeed](sse(s.chunks));
    if (s.end === 'done') stream[kEnd]();
    return stream;
  }
}

/** Feeds more of an open stream, or ends or fails it. */
export function feed(stream: EngineEventStream, chunks: string[]): void {
  stream[kFeed](sse(chunks));
}
export function end(stream: EngineEventStream): void {
  stream[kEnd]();
}
export function fail(stream: EngineEventStream, err: KvgateError): void {
  stream[kFail](err, false);
}

const sse = (data: string[]): Buffer => Buffer.from(data.map((d) => `data: ${d}\n\n`).join(''));

/** One chat chunk carrying `content` (one output token each), or the final chunk with usage. */
export function chunk(content: string): string {
  return JSON.stringify({
    id: 'chatcmpl-1',
    object: 'chat.completion.chunk',
    created: 1,
    model: 'm',
    choices: [{ index: 0, delta: { content }, logprobs: null, finish_reason: null }],
  });
}
export function usageChunk(completionTokens: number, cachedTokens: number, promptTokens: number): string {
  return JSON.stringify({
    id: 'chatcmpl-1',
    object: 'chat.completion.chunk',
    created: 1,
    model: 'm',
    choices: [],
    usage: {
      prompt_tokens: promptTokens,
      completion_tokens: completionTokens,
      total_tokens: promptTokens + completionTokens,
      prompt_tokens_details: { cached_tokens: cachedTokens },
    },
  });
}

export function worker(id: number): WorkerInfo {
  return {
    id,
    model: 'm',
    url: `http://engine-${id}.test`,
    role: 'aggregated',
    dialect: 'vllm',
    dpStart: 0,
    dpSize: 1,
  } as WorkerInfo;
}

export const slot = (workerId: number): WorkerRank => ({ workerId, dpRank: 0 });

export const BLOCK = 16;

let nextId = 0;

/** A streamed chat leg of `tokens` prompt tokens; `cancel` is the client's side of its signal. */
export function leg(
  overrides: Partial<LegRequest> = {},
  tokens = 64,
): { req: LegRequest; cancel: Cancellation; clock: ManualClock } {
  const cancel = new Cancellation();
  const ids = Array.from({ length: tokens }, (_, i) => (i * 7919 + 13) % 50_000);
  const clock = new ManualClock();
  const req: LegRequest = {
    requestId: `r${++nextId}`,
    path: '/v1/chat/completions',
    body: { model: 'm', messages: [{ role: 'user', content: 'hi' }], stream: true },
    stream: true,
    isl: tokens,
    hashes: promptHashes(ids, BLOCK),
    routing: {},
    phase: 'aggregated',
    signal: cancel.signal,
    receivedAt: clock.now(),
    ...overrides,
  };
  return { req, cancel, clock };
}

export const rng = (): ReturnType<typeof seededRng> => seededRng(11);
