/**
 * What a client is told when an engine refuses its request (a 4xx answer, or
 * an error event with a 4xx code in a stream it had begun): kvgate's own
 * OpenAI error object, with the engine's status and the engine's message,
 * because that message is the client's business ("This
 * model's maximum context length is ..."). Nothing else of the engine's answer
 * goes out: not its headers, not the rest of its body, not an address.
 *
 * Contract of `refusalBody`: `error.code` is KVG_ERR_ENGINE_REJECTED and
 * `error.type` `invalid_request_error`; `error.message` is the engine's
 * message (OpenAI `{error: {message}}`, `{error: "..."}`, `{message}`, FastAPI
 * `{detail}` as a string or a list of `{loc, msg}`, or a `text/plain` body)
 * without the lines of a stack trace (Python's, or JavaScript's and Java's `at`
 * frames: marked once at the end), with every address in it replaced by
 * `[address]` (URLs, IPv4, bracketed IPv6, `host:port`, and the worker's own
 * host however written) and every absolute file path by `[path]`, then cut to
 * REFUSAL_MESSAGE_MAX_BYTES of UTF-8 with a marker; an answer with no such
 * message (an HTML page from a proxy, a body cut at the engine client's
 * `maxErrorBodyBytes`) gets a fixed sentence naming the worker and the status.
 * `error.param` is the engine's when it reads as a field name, else null.
 * Addresses and paths are replaced before the cut, so a cut never leaves half of one.
 */
import type { ErrorBody } from '../common/index.js';
import { KvgateError } from '../errors/index.js';

/** The most UTF-8 bytes of an engine's message a client is sent, marker included. */
export const REFUSAL_MESSAGE_MAX_BYTES = 1024;
const TRUNCATED = ' [truncated by kvgate]';
const REDACTED = '[address]';
const PATH_REDACTED = '[path]';
const STACK_REMOVED = ' [stack trace removed by kvgate]';

/**
 * URLs with a scheme (not their trailing punctuation: "see http://h:1/x." keeps its full stop); bracketed IPv6
 * and IPv4 literals, with a port or not; host names with a port of two to five digits, dotted or a single label
 * with a letter in it (`prefill-0:8000`, `vllm:8000`: Kubernetes Services and Compose services are named so).
 * The single-label rule also takes prose written without a space (`tokens:4096`): a word lost from a message is
 * the price of never passing on a peer's address, which an engine names when it fails to reach one (a P/D
 * transfer's prefill peer). Times (`12:30`) and `max_tokens:4096` (an underscore is no host's) are kept.
 */
const ADDRESS = new RegExp(
  [
    String.raw`\b[a-z][a-z0-9+.-]*://[^\s"'<>()[\]{}]*[^\s"'<>()[\]{}.,;:!?]`,
    String.raw`\[[0-9a-f:.]*:[0-9a-f:.]*\](?::\d{1,5})?`,
    String.raw`\b(?:\d{1,3}\.){3}\d{1,3}(?::\d{1,5})?\b`,
    String.raw`(?<![\w.-])(?:[a-z0-9-]+(?:\.[a-z0-9-]+)+:\d{1,5}|[a-z0-9-]*[a-z][a-z0-9-]*:\d{2,5})\b`,
  ].join('|'),
  'gi',
);

/**
 * Absolute file paths: POSIX ones of two segments or more (`/opt/vllm/serving_chat.py`, `/models/llama-3`), not an
 * HTTP API path (`/v1/completions`: the client's own vocabulary), and Windows drive paths. One segment (`/generate`)
 * and a slash inside a word (`and/or`, `tokens/s`) are kept.
 */
const FILE_PATH = /(?<![\w.:/~-])(?:\/(?!v\d+\/)[\w.@+-]+(?:\/[\w.@+-]+)+\/?|[a-z]:\\[^\s"'<>|]+)/gi;

/** The lines of a stack trace: Python's header and frames (`File "...", line N`), `at` frames of JavaScript and Java. */
const TRACEBACK = /^\s*Traceback \(most recent call last\):?\s*$/;
const PY_FRAME = /^\s*File "[^"]*", line \d+/;
const AT_FRAME = /^\s+at \S.*(?:\(.*:\d+(?::\d+)?\)|:\d+(?::\d+)?)\s*$/;

/** A field name as OpenAI's `param` gives it (`messages[0].content`); anything else is not passed on. */
const PARAM = /^[\w.[\]-]{1,64}$/;

/** What an engine answered when it refused a request. */
export interface EngineRefusal {
  /** The engine's status (4xx). */
  readonly status: number;
  /** The body parsed as JSON; undefined when it was not JSON (or was cut). */
  readonly json: unknown;
  /** The body as text when it was `text/plain`, else undefined. */
  readonly text: string | undefined;
  /** The engine's URL: its host is redacted from the message however it is written. */
  readonly worker: string;
}

/** kvgate's error object for an engine's refusal (see the file comment). */
export function refusalBody(refusal: EngineRefusal, workerId: number): ErrorBody {
  const said = messageOf(refusal.json) ?? nonEmpty(refusal.text);
  const message =
    said === undefined
      ? `the engine of worker ${workerId} refused the request (HTTP ${refusal.status})`
      : bounded(redactPaths(redactAddresses(withoutStack(said), refusal.worker)), REFUSAL_MESSAGE_MAX_BYTES);
  const param = paramOf(refusal.json);
  return { error: { message, type: 'invalid_request_error', param, code: 'KVG_ERR_ENGINE_REJECTED' } };
}

/** `text` with every address, and every spelling of the worker's own host, replaced by `[address]`. */
export function redactAddresses(text: string, workerUrl: string): string {
  let out = text.replace(ADDRESS, REDACTED);
  const host = hostOf(workerUrl);
  if (host !== undefined) {
    const escaped = host.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
    out = out.replace(new RegExp(`(?<![\\w.-])${escaped}(?![\\w-])(?::\\d{1,5})?`, 'gi'), REDACTED);
  }
  return out;
}

/** `text` with every absolute file path replaced by `[path]` (after `redactAddresses`: a URL's path is gone with it). */
export function redactPaths(text: string): string {
  return text.replace(FILE_PATH, PATH_REDACTED);
}

/**
 * `text` without the lines of a stack trace (a Python frame's source line, indented under it, goes with it), marked
 * once at the end; the exception's own line (Python's last: `ValueError: ...`) is kept. Unchanged when it has none.
 */
function withoutStack(text: string): string {
  const kept: string[] = [];
  let removed = false;
  let frame = false;
  for (const line of text.split(/\r?\n/)) {
    const source = frame && /^\s{4,}\S/.test(line);
    frame = PY_FRAME.test(line);
    if (source || frame || TRACEBACK.test(line) || AT_FRAME.test(line)) {
      removed = true;
      continue;
    }
    kept.push(line);
  }
  return removed ? `${kept.join('\n').trim()}${STACK_REMOVED}` : text;
}

function hostOf(url: string): string | undefined {
  try {
    const host = new URL(url).hostname.replace(/^\[|\]$/g, '');
    return host === '' ? undefined : host;
  } catch {
    return undefined;
  }
}

/** `text` cut to `max` UTF-8 bytes, marker included, on a character boundary. */
function bounded(text: string, max: number): string {
  if (Buffer.byteLength(text) <= max) return text;
  const room = max - Buffer.byteLength(TRUNCATED);
  // A cut inside a character decodes to U+FFFD at the end: drop it.
  const head = Buffer.from(text)
    .toString('utf8', 0, room)
    .replace(/\uFFFD+$/, '');
  return `${head}${TRUNCATED}`;
}

function nonEmpty(text: string | undefined): string | undefined {
  return text !== undefined && text.trim() !== '' ? text.trim() : undefined;
}

function record(v: unknown): Record<string, unknown> | undefined {
  return typeof v === 'object' && v !== null && !Array.isArray(v) ? (v as Record<string, unknown>) : undefined;
}

/** The human message of an engine's error body, in the shapes vLLM, SGLang and FastAPI answer with. */
export function messageOf(json: unknown): string | undefined {
  const obj = record(json);
  if (obj === undefined) return undefined;
  const error = obj['error'];
  const inner = record(error);
  if (typeof inner?.['message'] === 'string') return nonEmpty(inner['message']);
  if (typeof error === 'string') return nonEmpty(error);
  if (typeof obj['message'] === 'string') return nonEmpty(obj['message']);
  const detail = obj['detail'];
  if (typeof detail === 'string') return nonEmpty(detail);
  if (Array.isArray(detail)) {
    // FastAPI's validation errors: [{loc: ['body', 'max_tokens'], msg: '...'}].
    const parts = detail
      .map(record)
      .filter((d) => typeof d?.['msg'] === 'string')
      .map((d) => {
        const loc = Array.isArray(d!['loc']) ? (d!['loc'] as unknown[]).filter((p) => p !== 'body').join('.') : '';
        return loc === '' ? String(d!['msg']) : `${loc}: ${String(d!['msg'])}`;
      });
    return parts.length > 0 ? parts.join('; ') : undefined;
  }
  return undefined;
}

function paramOf(json: unknown): string | null {
  const obj = record(json);
  const param = record(obj?.['error'])?.['param'] ?? obj?.['param'];
  return typeof param === 'string' && PARAM.test(param) ? param : null;
}

/**
 * An engine's error event in a stream it had begun (`data: {"error": {...}}`): vLLM and SGLang send one when
 * generation fails after the headers went out, and SGLang also for requests it refuses after starting its stream.
 * The leg fails there (the request guard throws it).
 * - A 4xx `code` is a refusal: KVG_ERR_ENGINE_REJECTED with the engine's status, and `refusal`, the client's answer
 *   (`refusalBody`: the engine's message bounded, without addresses), whose message and param the error carries,
 *   marked `detail.redacted` so the gateway passes it on as it is.
 * - Anything else is KVG_ERR_ENGINE_FAILED; the engine's text is in the message for the log only, and a client sees
 *   kvgate's fixed sentence for the code (src/frontend/public-error.ts), never the engine's event. A code of 500,
 *   502, 503 or 504 says the engine failed, not the request (a dead engine loop), so the leg may be resumed on
 *   another worker (`isMigratable`); a refusal is the client's answer and never is.
 */
export class EngineStreamError extends KvgateError {
  override readonly statusCode: number;
  /** kvgate's error object for a refusal (a 4xx code); undefined for a failure. */
  readonly refusal: ErrorBody | undefined;

  constructor(error: unknown, worker: { readonly id: number; readonly url: string }) {
    const e = typeof error === 'object' && error !== null ? (error as Record<string, unknown>) : {};
    const code = e['code'];
    const status = typeof code === 'number' && code >= 400 && code < 500 ? code : undefined;
    const upstreamCode = typeof code === 'number' || typeof code === 'string' ? code : null;
    if (status !== undefined) {
      // A refusal: the message is the client's answer, so it is the one already bounded and redacted.
      const refusal = refusalBody({ status, json: { error }, text: undefined, worker: worker.url }, worker.id);
      const { message, param } = refusal.error;
      super('KVG_ERR_ENGINE_REJECTED', message, { workerId: worker.id, upstreamCode, param, redacted: true });
      this.refusal = refusal;
    } else {
      const said = typeof error === 'string' ? error : typeof e['message'] === 'string' ? e['message'] : 'no message';
      super('KVG_ERR_ENGINE_FAILED', `the engine failed the request mid-stream: ${said}`, {
        workerId: worker.id,
        upstreamCode,
      });
      this.refusal = undefined;
    }
    this.name = 'EngineStreamError';
    this.statusCode = status ?? 502;
  }
}
