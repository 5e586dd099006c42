/**
 * The streams soak's client: one streamed request read over node:http at a
 * pace of its own (so a pausing reader really stops taking bytes off its
 * socket and the gateway's buffers fill), judged as it ends.
 *
 * It reads bytes without decoding the stream, so that thousands of long
 * streams cost the load generator little: it counts events (`\n\ndata: `,
 * across chunk boundaries), watches for an error event, and keeps the tail
 * for the usage chunk and `[DONE]`. A stream is `done` when it ends cleanly
 * with every event (one per token, the chat role chunk, the usage chunk,
 * `[DONE]` last) and the usage reports every token; `left` when its client
 * left on purpose; `rejected` for a non-200 answer; `hung` when it has not
 * ended by its deadline; `failed` otherwise (cut, an error event, a short
 * stream).
 */
import { request, type Agent } from 'node:http';

export type Reader = 'straight' | 'slow' | 'pausing' | 'leaver';

export interface StreamSpec {
  readonly path: '/v1/completions' | '/v1/chat/completions';
  /** The JSON body (streamed, `ignore_eos`, usage asked for): exactly `tokens` tokens. */
  readonly body: string;
  readonly tokens: number;
  readonly reader: Reader;
  /** After every this many bytes read, pause `pauseMs` (0: never). */
  readonly pauseEveryBytes: number;
  readonly pauseMs: number;
  /** A pausing reader's one long stop: `stopMs` once `stopAtBytes` were read (0: none). */
  readonly stopAtBytes: number;
  readonly stopMs: number;
  /** A leaver closes its connection once this many bytes were read (0: never). */
  readonly leaveAtBytes: number;
  /** From the request to the deadline past which the stream counts as hung (its planned pauses included). */
  readonly deadlineMs: number;
}

export type StreamEnd = 'done' | 'left' | 'rejected' | 'failed' | 'hung';

export interface StreamResult {
  readonly end: StreamEnd;
  readonly status: number;
  /** Request to the first byte of the answer's body (its first event); undefined when none came. */
  readonly ttftMs: number | undefined;
  readonly ms: number;
  readonly bytes: number;
  readonly events: number;
  /** Why it failed or hung, for the summary. */
  readonly detail?: string;
}

const EVENT = Buffer.from('\n\ndata: ');
const ERROR_EVENT = Buffer.from('\n\ndata: {"error"');
const DONE = Buffer.from('data: [DONE]\n\n');
const TAIL_BYTES = 2048;

/** Occurrences of `needle` in `chunk`, and in the seam between `prev` (the bytes before it) and `chunk`. */
function occurrences(prev: Buffer, chunk: Buffer, needle: Buffer): number {
  const k = needle.length - 1;
  const seam = Buffer.concat([prev.subarray(Math.max(0, prev.length - k)), chunk.subarray(0, k)]);
  let n = 0;
  for (const buf of [seam, chunk]) for (let at = buf.indexOf(needle); at >= 0; at = buf.indexOf(needle, at + 1)) n++;
  return n;
}

/** Events a complete stream of `spec` holds: a token each, the chat role chunk, the usage chunk, `[DONE]`. */
function expectedEvents(spec: StreamSpec): number {
  return spec.tokens + (spec.path === '/v1/chat/completions' ? 3 : 2);
}

/** Why a stream that ended cleanly is not complete; undefined when it is. */
function incomplete(spec: StreamSpec, events: number, errors: number, tail: Buffer): string | undefined {
  if (errors > 0) return `${errors} error event(s)`;
  if (tail.length < DONE.length || !tail.subarray(tail.length - DONE.length).equals(DONE))
    return 'no [DONE] at the end';
  if (events !== expectedEvents(spec)) return `${events} events, expected ${expectedEvents(spec)}`;
  const usage = /"completion_tokens":(\d+)/.exec(tail.toString('latin1'));
  if (usage === null || Number(usage[1]) !== spec.tokens) {
    return `usage completion_tokens ${usage?.[1] ?? 'missing'}, expected ${spec.tokens}`;
  }
  return undefined;
}

/** Sends `spec` to the gateway at `base` and reads its answer at the spec's pace; resolves when it ends, is left, or hangs. */
export function runStream(base: string, spec: StreamSpec, agent: Agent): Promise<StreamResult> {
  const started = performance.now();
  return new Promise((resolve) => {
    let status = 0;
    let ttftMs: number | undefined;
    let bytes = 0;
    let events = 0;
    let errors = 0;
    let lastByteAt = started;
    let paused = false;
    // The seam before the first byte: the body's first `data: ` counts as an event.
    let tail = Buffer.from('\n\n');
    const timers = new Set<NodeJS.Timeout>();
    let settled = false;
    const settle = (end: StreamEnd, detail?: string): void => {
      if (settled) return;
      settled = true;
      for (const t of timers) clearTimeout(t);
      clearTimeout(deadline);
      resolve({
        end,
        status,
        ttftMs,
        ms: performance.now() - started,
        bytes,
        events,
        ...(detail === undefined ? {} : { detail }),
      });
    };
    const headers = { 'content-type': 'application/json', accept: 'text/event-stream' };
    const req = request(`${base}${spec.path}`, { method: 'POST', agent, headers }, (res) => {
      status = res.statusCode ?? 0;
      if (status !== 200) {
        res.resume();
        res.on('end', () => settle('rejected', `HTTP ${status}`));
        res.on('error', () => settle('rejected', `HTTP ${status}`));
        return;
      }
      let nextPause = spec.pauseEveryBytes;
      let stopped = spec.stopAtBytes === 0;
      const pauseFor = (ms: number): void => {
        paused = true;
        res.pause();
        const t = setTimeout(() => {
          timers.delete(t);
          paused = false;
          res.resume();
        }, ms);
        timers.add(t);
      };
      res.on('data', (chunk: Buffer) => {
        const now = performance.now();
        ttftMs ??= now - started;
        lastByteAt = now;
        bytes += chunk.length;
        events += occurrences(tail, chunk, EVENT);
        errors += occurrences(tail, chunk, ERROR_EVENT);
        tail =
          chunk.length >= TAIL_BYTES
            ? Buffer.from(chunk.subarray(chunk.length - TAIL_BYTES))
            : Buffer.concat([tail, chunk]).subarray(-TAIL_BYTES);
        if (spec.leaveAtBytes > 0 && bytes >= spec.leaveAtBytes) {
          settle('left');
          req.destroy();
          return;
        }
        if (!stopped && bytes >= spec.stopAtBytes) {
          stopped = true;
          pauseFor(spec.stopMs);
        } else if (nextPause > 0 && bytes >= nextPause) {
          nextPause = bytes + spec.pauseEveryBytes;
          pauseFor(spec.pauseMs);
        }
      });
      res.on('end', () => {
        const why = incomplete(spec, events, errors, tail);
        settle(why === undefined ? 'done' : 'failed', why);
      });
      res.on('error', (err) => settle('failed', `cut: ${err.message}`));
      res.on('close', () => settle('failed', `cut after ${bytes} bytes, ${events} events`));
    });
    const deadline = setTimeout(() => {
      settle(
        'hung',
        `no end after ${Math.round(spec.deadlineMs)} ms: ${bytes} bytes, ${events} of ${expectedEvents(spec)} events, ` +
          `last byte ${Math.round(performance.now() - lastByteAt)} ms ago, reader ${spec.reader}${paused ? ' (pausing)' : ''}`,
      );
      req.destroy();
    }, spec.deadlineMs);
    req.on('error', (err) => settle('failed', `request: ${err.message}`));
    req.end(spec.body);
  });
}
