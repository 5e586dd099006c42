/**
 * The online replay's client: sends each workload request at its arrival
 * time (wall clock, from the start of the run) as a streaming
 * `POST /v1/completions` with the synthesised prompt as token ids, and
 * measures at the client: first token, every later token, the end of the
 * stream, and the engine's `usage.prompt_tokens_details.cached_tokens`
 * (asked for with `stream_options.include_usage`).
 *
 * One chunk with a choice = one generated token (vLLM and the mocker stream
 * one token per chunk); the final usage chunk's `completion_tokens` is taken
 * as the output length when present. Requests are never retried: a failure
 * is recorded with its HTTP status or error and the run goes on.
 */
import { Agent, request } from 'undici';
import { newOutcome, type RequestOutcome } from './results.js';
import { HitTimeline } from './timeline.js';
import type { TokenSynthesizer } from './token-synth.js';
import type { ReplayRequest, Workload } from './workload.js';

export interface LoadGeneratorOptions {
  /** Base URL of the gateway (or of one engine), e.g. http://127.0.0.1:8080. */
  readonly url: string;
  readonly model: string;
  readonly synth: TokenSynthesizer;
  /** Seed of each request's generated tokens (sent as `seed`). */
  readonly requestSeed: (index: number) => number;
  /** Width of the hit-rate buckets, ms. */
  readonly bucketMs: number;
  /** Extra headers (auth). */
  readonly headers?: Readonly<Record<string, string>>;
  /** Send each request's session as its client would name it (`x-session-id`, `x-parent-session-id`). */
  readonly sessions?: boolean;
  readonly onDone?: (done: number, total: number) => void;
  /** Called at each request's start and end (engine load sampling hooks). */
  readonly now?: () => number;
}

export interface LoadRun {
  readonly outcomes: RequestOutcome[];
  readonly hits: HitTimeline;
  /** Wall ms from the start of the run to the last request's end. */
  readonly endMs: number;
}

interface SseState {
  buffer: string;
}

/** A request's session headers, as an agent client names its session and a subagent's parent. */
function sessionHeaders(r: ReplayRequest): Record<string, string> {
  const s = r.session;
  if (s === undefined) return {};
  return s.parentId === undefined
    ? { 'x-session-id': s.id }
    : { 'x-session-id': s.id, 'x-parent-session-id': s.parentId };
}

/** Splits complete SSE events off the buffer; returns the `data:` payloads. */
export function takeSseData(state: SseState, chunk: string): string[] {
  state.buffer += chunk;
  const out: string[] = [];
  for (;;) {
    const idx = state.buffer.search(/\r?\n\r?\n/);
    if (idx < 0) break;
    const event = state.buffer.slice(0, idx);
    state.buffer = state.buffer.slice(state.buffer.slice(idx).startsWith('\r\n\r\n') ? idx + 4 : idx + 2);
    const data = event
      .split(/\r?\n/)
      .filter((l) => l.startsWith('data:'))
      .map((l) => l.slice(5).replace(/^ /, ''))
      .join('\n');
    if (data !== '') out.push(data);
  }
  return out;
}

/** One streamed usage or chunk message, as far as the load generator reads it. */
interface StreamMessage {
  choices?: unknown[];
  usage?: { completion_tokens?: number; prompt_tokens_details?: { cached_tokens?: number } | null } | null;
  error?: { message?: string };
}

/**
 * Reads one SSE answer to its end: token times into `o`, the cache hit the
 * usage reports (into `o` and `hits`, at the send time).
 * @throws Error for an error event in the stream
 */
async function readStream(
  body: AsyncIterable<string> & { setEncoding(e: string): unknown },
  o: RequestOutcome,
  r: ReplayRequest,
  sentAt: number,
  elapsed: () => number,
  hits: HitTimeline,
): Promise<{ tokens: number; completionTokens: number | null }> {
  const state: SseState = { buffer: '' };
  let tokens = 0;
  let completionTokens: number | null = null;
  body.setEncoding('utf8');
  for await (const chunk of body) {
    for (const data of takeSseData(state, chunk)) {
      if (data === '[DONE]') continue;
      const msg = JSON.parse(data) as StreamMessage;
      if (msg.error !== undefined) throw new Error(msg.error.message ?? 'error event in stream');
      if (Array.isArray(msg.choices) && msg.choices.length > 0) {
        const t = elapsed();
        if (tokens === 0) o.firstTokenMs = t;
        tokens++;
        o.finishMs = t;
      }
      if (msg.usage !== undefined && msg.usage !== null) {
        if (typeof msg.usage.completion_tokens === 'number') completionTokens = msg.usage.completion_tokens;
        const cached = msg.usage.prompt_tokens_details?.cached_tokens;
        if (typeof cached === 'number') {
          o.cachedTokens = cached;
          hits.record(sentAt, r.inputLength, cached);
        }
      }
    }
  }
  return { tokens, completionTokens };
}

/**
 * The body of one request's `POST /v1/completions`: its synthesised prompt as
 * token ids, exactly its recorded output length (`ignore_eos`), streamed, with
 * the usage chunk (which carries the cached tokens) asked for.
 */
function completionBody(r: ReplayRequest, opts: LoadGeneratorOptions): string {
  return JSON.stringify({
    model: opts.model,
    prompt: opts.synth.tokens(r.hashIds, r.inputLength),
    max_tokens: r.outputLength,
    ignore_eos: true,
    stream: true,
    stream_options: { include_usage: true },
    seed: opts.requestSeed(r.index),
  });
}

const sleep = (ms: number): Promise<void> => new Promise<void>((resolve) => setTimeout(resolve, Math.ceil(ms)));

/**
 * Sends every request and resolves when all have ended: open-loop ones at their arrival time,
 * closed-loop ones (`after`) `pauseMs` after the last request they wait on ended (finished or failed).
 */
async function sendAll(
  requests: readonly ReplayRequest[],
  send: (r: ReplayRequest) => Promise<void>,
  elapsed: () => number,
): Promise<void> {
  const inFlight: Promise<void>[] = [];
  const release: (() => void)[] = [];
  const ends = requests.map((r) => new Promise<void>((resolve) => (release[r.index] = resolve)));
  const sendOne = (r: ReplayRequest): Promise<void> => send(r).finally(() => release[r.index]!());
  for (const r of requests) {
    const after = r.after;
    if (after === undefined) continue;
    inFlight.push(
      Promise.all(after.requests.map((d) => ends[d]!))
        .then(() => sleep(after.pauseMs))
        .then(() => sendOne(r)),
    );
  }
  for (const r of requests) {
    if (r.after !== undefined) continue;
    // Timers may fire a fraction of a millisecond early: never send before the arrival time.
    for (let wait = r.arrivalMs - elapsed(); wait > 0; wait = r.arrivalMs - elapsed()) await sleep(wait);
    inFlight.push(sendOne(r));
  }
  await Promise.all(inFlight);
}

/**
 * Replays the workload against `url` in real time. Resolves when every
 * request has ended (completed or failed).
 */
export async function generateLoad(workload: Workload, opts: LoadGeneratorOptions): Promise<LoadRun> {
  const now = opts.now ?? (() => performance.now());
  const agent = new Agent({
    connections: null,
    pipelining: 1,
    keepAliveTimeout: 30_000,
    headersTimeout: 0,
    bodyTimeout: 0,
  });
  const endpoint = new URL('/v1/completions', opts.url).toString();
  const outcomes = workload.requests.map((r) => newOutcome(r.index, r.arrivalMs, r.inputLength, r.outputLength));
  const hits = new HitTimeline(opts.bucketMs);
  let done = 0;
  let endMs = 0;
  const t0 = now();
  const elapsed = (): number => now() - t0;

  const send = async (r: ReplayRequest): Promise<void> => {
    const o = outcomes[r.index]!;
    const body = completionBody(r, opts);
    // Latencies are measured from the actual send (timer lag is not the server's).
    const sentAt = elapsed();
    o.arrivalMs = sentAt;
    try {
      const res = await request(endpoint, {
        method: 'POST',
        body,
        dispatcher: agent,
        headers: {
          'content-type': 'application/json',
          accept: 'text/event-stream',
          'x-request-id': `replay-${r.index}`,
          ...(opts.sessions === true ? sessionHeaders(r) : {}),
          ...opts.headers,
        },
      });
      const worker = res.headers['x-kvgate-worker'];
      if (typeof worker === 'string') o.workerId = Number(worker);
      if (res.statusCode !== 200) {
        const text = await res.body.text();
        o.error = `HTTP ${res.statusCode}: ${text.slice(0, 300)}`;
        return;
      }
      const { tokens, completionTokens } = await readStream(
        res.body as AsyncIterable<string> & { setEncoding(e: string): unknown },
        o,
        r,
        sentAt,
        elapsed,
        hits,
      );
      o.outputTokens = completionTokens ?? tokens;
      if (tokens === 0) o.error = 'the stream ended without a token';
    } catch (err) {
      o.error = err instanceof Error ? err.message : String(err);
    } finally {
      done++;
      endMs = Math.max(endMs, elapsed());
      opts.onDone?.(done, outcomes.length);
    }
  };

  try {
    await sendAll(workload.requests, send, elapsed);
  } finally {
    await agent.close();
  }
  return { outcomes, hits, endMs };
}
