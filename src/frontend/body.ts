/**
 * Reading a request body at the gateway's edge, before the request holds a
 * concurrency slot: bounded in size, in the pause between two chunks and in
 * the time the whole body may take, and decoded from its `Content-Encoding`
 * within the same size limit. Checking it is UTF-8 text (`bodyText`, which
 * skips a byte order mark) and parsing it (`parseBodyObject`, nesting bound
 * first) happen on whichever thread parses the body (prepare.ts).
 *
 * Contract for an oversized body (lingering close): the reader keeps reading
 * and discarding what the client still sends, for at most `LINGER_MS` and
 * `LINGER_BYTES`, and only then rejects with KVG_ERR_BODY_TOO_LARGE, so the
 * answer (with `Connection: close`) goes out once the client has stopped
 * sending: a client that writes its whole body before reading (Node's fetch)
 * reads the 413 instead of a reset. Other answers that close the connection
 * before the body was read (an unsupported encoding, a refused client) first
 * discard it for a moment (`discardBody`) for the same reason.
 *
 * A body that declares its length (Content-Length) of at least
 * `PREALLOCATE_BYTES` is copied, chunk by chunk as it arrives, into one
 * buffer of that length, allocated when its first chunk arrives (a client
 * that sends only headers costs nothing): no list of chunks and no second copy
 * at the end, and the buffer owns its memory, so it moves to a preprocessing
 * thread rather than being copied (preprocessor.ts). The allocation is not
 * zero-filled, so its pages are committed as the body fills them.
 *
 * A UTF-8 byte order mark before the JSON is skipped: JSON (RFC 8259, section
 * 8.1) forbids sending one but lets a parser ignore it, and vLLM and SGLang
 * (FastAPI, Python's json.loads of the bytes) accept it, so a client that
 * works against an engine directly works through kvgate. The engine gets the
 * body without it. A second one is invalid JSON.
 */
import { isAscii, isUtf8, transcode } from 'node:buffer';
import type { IncomingMessage } from 'node:http';
import { finished } from 'node:stream';
import { brotliDecompress, gunzip, inflate, type InputType, type ZlibOptions } from 'node:zlib';
import { parseJsonObject, type CancelSignal } from '../common/index.js';
import { KvgateError } from '../errors/index.js';
import { refuseLoneSurrogates } from './lone-surrogates.js';

export interface BodyLimits {
  /** Bytes on the wire and bytes after decoding, each. */
  maxBodyBytes: number;
  /** Longest pause between two chunks of the body. */
  bodyTimeoutMs: number;
  /** Longest time the whole body may take to arrive, from when reading it starts (the request's headers have arrived). */
  bodyDeadlineMs: number;
}

/** How long, and how much, an oversized body is read and discarded before the 413 goes out. */
const LINGER_MS = 5_000;
const LINGER_BYTES = 64 * 1024 * 1024;

/**
 * From this declared length on, a body is read into one buffer of that length (module comment). Below it a body is
 * mostly one chunk, handed on as it is.
 */
const PREALLOCATE_BYTES = 64 * 1024;

/** The body's length as its Content-Length declares it; undefined when it declares none (chunked). */
function declaredLength(req: IncomingMessage): number | undefined {
  const raw = req.headers['content-length'];
  // Node's parser has checked the header (digits only, one value) and frames the body by it.
  return raw === undefined ? undefined : Number(raw);
}

/**
 * The chunks of a body as they arrive: copied into one buffer of the declared length, else kept as a list and
 * concatenated at the end. Contract: `bytes()` holds every byte added, in order, whatever the declared length says.
 */
class BodyChunks {
  #chunks: Buffer[] = [];
  #into: Buffer | undefined;
  #size = 0;
  /** The declared length, while a buffer of it may still be allocated. */
  #declared: number | undefined;

  constructor(declared: number | undefined) {
    this.#declared = declared !== undefined && declared >= PREALLOCATE_BYTES ? declared : undefined;
  }

  add(chunk: Buffer): void {
    const at = this.#size;
    this.#size += chunk.length;
    if (this.#declared !== undefined) {
      this.#into = Buffer.allocUnsafeSlow(this.#declared);
      this.#declared = undefined;
    }
    if (this.#into !== undefined && this.#size <= this.#into.length) {
      this.#into.set(chunk, at);
      return;
    }
    if (this.#into !== undefined) {
      // More than declared (a parser framing the body by its Content-Length never gives that): keep it all anyway.
      this.#chunks.push(this.#into.subarray(0, at));
      this.#into = undefined;
    }
    this.#chunks.push(chunk);
  }

  /** Drops what was read (an oversized body, a failure). */
  clear(): void {
    this.#chunks = [];
    this.#into = undefined;
    this.#declared = undefined;
  }

  bytes(): Buffer {
    const into = this.#into;
    if (into !== undefined) return this.#size === into.length ? into : into.subarray(0, this.#size);
    const chunks = this.#chunks;
    return chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, this.#size);
  }
}

type Decoder = (buf: InputType, opts: ZlibOptions, cb: (err: Error | null, out: Buffer) => void) => void;
const DECODERS: Record<string, Decoder> = { gzip: gunzip, 'x-gzip': gunzip, deflate: inflate, br: brotliDecompress };

function clientTooSlow(limits: BodyLimits, overdue: boolean): KvgateError {
  return overdue
    ? new KvgateError('KVG_ERR_CLIENT_TIMEOUT', `the request body did not arrive within ${limits.bodyDeadlineMs} ms`, {
        bodyDeadlineMs: limits.bodyDeadlineMs,
      })
    : new KvgateError(
        'KVG_ERR_CLIENT_TIMEOUT',
        `the request body paused for more than ${limits.bodyTimeoutMs} ms between two chunks`,
        { bodyTimeoutMs: limits.bodyTimeoutMs },
      );
}

function tooLarge(limit: number, size: string): KvgateError {
  return new KvgateError(
    'KVG_ERR_BODY_TOO_LARGE',
    `the request body (${size}) is larger than the limit of ${limit} bytes`,
    { limit },
  );
}

/**
 * The decoder for the request's Content-Encoding; undefined for none or identity.
 * @throws KvgateError KVG_ERR_UNSUPPORTED_ENCODING for any other coding, or several.
 */
function decoderOf(req: IncomingMessage): Decoder | undefined {
  const raw = req.headers['content-encoding'];
  if (raw === undefined) return undefined;
  const coding = raw.trim().toLowerCase();
  if (coding === '' || coding === 'identity') return undefined;
  const decoder = DECODERS[coding];
  if (decoder === undefined) {
    throw new KvgateError(
      'KVG_ERR_UNSUPPORTED_ENCODING',
      `Content-Encoding ${JSON.stringify(raw.slice(0, 40))} is not supported; send the body plain or as gzip, deflate or br`,
      { param: 'content-encoding' },
    );
  }
  return decoder;
}

/** The raw bytes of the body, as received. */
function readRaw(req: IncomingMessage, limits: BodyLimits, signal: CancelSignal): Promise<Buffer> {
  const limit = limits.maxBodyBytes;
  return new Promise((resolve, reject) => {
    const declared = declaredLength(req);
    const chunks = new BodyChunks(declared);
    let size = 0;
    let overflow: KvgateError | undefined;
    let lingerUntil = 0;
    const bodyDueAt = performance.now() + limits.bodyDeadlineMs;
    let idle: NodeJS.Timeout | undefined;
    const cleanup = (): void => {
      clearTimeout(idle);
      req.off('data', onData);
      req.off('end', onEnd);
      req.off('error', onError);
      signal.removeEventListener('abort', onAbort);
    };
    const fail = (err: Error): void => {
      cleanup();
      chunks.clear();
      // Whatever still arrives is discarded, not buffered (Node pulls it off the wire for keep-alive).
      req.resume();
      reject(err);
    };
    /** When the pause allowed now ends; while receiving, a chunk only moves it and the timer sleeps again for what is left. */
    let deadline = 0;
    const onIdle = (): void => {
      idle = undefined;
      const left = deadline - performance.now();
      if (left >= 1) {
        idle = setTimeout(onIdle, left);
        return;
      }
      fail(overflow ?? clientTooSlow(limits, bodyDueAt - performance.now() < 1));
    };
    const armIdle = (): void => {
      const now = performance.now();
      const ms = Math.min(limits.bodyTimeoutMs, Math.max(0, (overflow !== undefined ? lingerUntil : bodyDueAt) - now));
      deadline = now + ms;
      // A running timer fires no later than the new deadline only while the pause allowed stays the same (capped by
      // the body's own deadline, a later deadline is still never earlier than an earlier one).
      if (idle !== undefined && overflow === undefined) return;
      clearTimeout(idle);
      idle = setTimeout(onIdle, ms);
    };
    const startLinger = (err: KvgateError): void => {
      overflow = err;
      chunks.clear();
      lingerUntil = performance.now() + LINGER_MS;
      armIdle();
    };
    const onData = (chunk: Buffer): void => {
      size += chunk.length;
      if (overflow !== undefined) {
        if (size > LINGER_BYTES || performance.now() >= lingerUntil) fail(overflow);
        else armIdle();
        return;
      }
      if (size > limit) startLinger(tooLarge(limit, `over ${limit} bytes`));
      else chunks.add(chunk);
      if (overflow === undefined) armIdle();
    };
    const onEnd = (): void => {
      if (overflow !== undefined) return fail(overflow);
      cleanup();
      resolve(chunks.bytes());
    };
    const onError = (err: Error): void => fail(err);
    const onAbort = (): void => fail(signal.reason as Error);
    if (signal.aborted) return fail(signal.reason as Error);
    signal.addEventListener('abort', onAbort, { once: true });
    req.on('data', onData);
    req.on('end', onEnd);
    req.on('error', onError);
    if (declared !== undefined && declared > limit) startLinger(tooLarge(limit, `${declared} bytes`));
    else armIdle();
  });
}

function decode(decoder: Decoder, raw: Buffer, limit: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    decoder(raw, { maxOutputLength: limit }, (err, out) => {
      if (err === null) return resolve(out);
      if ((err as NodeJS.ErrnoException).code === 'ERR_BUFFER_TOO_LARGE')
        return reject(tooLarge(limit, `decoded, over ${limit} bytes`));
      reject(
        new KvgateError(
          'KVG_ERR_INVALID_REQUEST',
          `the request body does not decode as its Content-Encoding says: ${err.message}`,
          { param: 'content-encoding' },
        ),
      );
    });
  });
}

/**
 * How long, and how much, a body is read and discarded before an answer that closes the connection without having
 * read it (an unsupported encoding, a refused client).
 */
export const DISCARD_MS = 1000;

/**
 * Reads and discards what is left of a request body, for at most `ms` and `maxBytes`: closing a connection with
 * unread bytes makes the kernel reset it, and a client that has not read the answer yet then loses it.
 */
export function discardBody(req: IncomingMessage, ms: number, maxBytes: number): Promise<void> {
  if (req.complete || req.destroyed) return Promise.resolve();
  return new Promise((resolve) => {
    let seen = 0;
    const done = (): void => {
      clearTimeout(timer);
      stopWatching();
      req.off('data', onData);
      resolve();
    };
    const onData = (chunk: Buffer): void => {
      seen += chunk.length;
      if (seen > maxBytes) done();
    };
    const timer = setTimeout(done, ms);
    const stopWatching = finished(req, done); // its end, an error or its connection's close
    req.on('data', onData);
    req.resume();
  });
}

// The byte order mark is kept in the text, so skipping it is this module's explicit choice (see the header).
const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });
const BOM = 0xfeff;

/**
 * The request body's bytes: read within `limits` and decoded from its Content-Encoding (not yet checked to be
 * text: `bodyText` does that, on whichever thread parses the body).
 * Rejects with `signal.reason` when the signal fires first (client gone).
 * @throws KvgateError KVG_ERR_BODY_TOO_LARGE (on the wire or decoded), KVG_ERR_CLIENT_TIMEOUT (a pause between chunks,
 *   or the whole body late), KVG_ERR_UNSUPPORTED_ENCODING, KVG_ERR_INVALID_REQUEST (a body that does not decode).
 */
export async function readBodyBytes(req: IncomingMessage, limits: BodyLimits, signal: CancelSignal): Promise<Buffer> {
  let decoder: Decoder | undefined;
  try {
    decoder = decoderOf(req);
  } catch (err) {
    await discardBody(req, DISCARD_MS, limits.maxBodyBytes);
    throw err;
  }
  const raw = await readRaw(req, limits, signal);
  return decoder === undefined ? raw : decode(decoder, raw, limits.maxBodyBytes);
}

/**
 * From this size on, a body is checked (simdutf) and converted apart rather than decoded by V8's UTF-8 decoder,
 * which builds a string with any non-ASCII character several times slower than ICU converts the same bytes to
 * UTF-16 (an agent's 700 KB conversation: milliseconds a turn); below it the decoder's fixed cost is lower.
 */
const DIRECT_DECODE_BYTES = 4096;

function notUtf8(): KvgateError {
  return new KvgateError('KVG_ERR_INVALID_JSON', 'the request body is not valid UTF-8');
}

function decodeSmall(bytes: Uint8Array): string {
  try {
    return utf8.decode(bytes);
  } catch {
    throw notUtf8();
  }
}

/** The same text as `decodeSmall` (valid UTF-8 decodes one way; a byte order mark is kept): ASCII as Latin-1. */
function decodeLarge(bytes: Uint8Array): string {
  const buf = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (isAscii(buf)) return buf.toString('latin1');
  if (!isUtf8(buf)) throw notUtf8();
  return transcode(buf, 'utf8', 'utf16le').toString('utf16le');
}

/**
 * A body's bytes as text, without a leading byte order mark.
 * @throws KvgateError KVG_ERR_INVALID_JSON when they are not UTF-8, or start with two byte order marks.
 */
export function bodyText(bytes: Uint8Array): string {
  const text = bytes.length < DIRECT_DECODE_BYTES ? decodeSmall(bytes) : decodeLarge(bytes);
  if (text.charCodeAt(0) !== BOM) return text;
  if (text.charCodeAt(1) === BOM) {
    throw new KvgateError(
      'KVG_ERR_INVALID_JSON',
      'the request body starts with two byte order marks; JSON allows none (RFC 8259), kvgate skips one',
    );
  }
  return text.slice(1);
}

/** `readBodyBytes`, then `bodyText`. */
export async function readBodyText(req: IncomingMessage, limits: BodyLimits, signal: CancelSignal): Promise<string> {
  return bodyText(await readBodyBytes(req, limits, signal));
}

/**
 * Nesting depth a request body may have. Deeper JSON is refused before it is parsed: every later step (schema
 * check, the structured clone to a preprocessing thread, the chat template) walks it recursively.
 */
const MAX_JSON_DEPTH = 100;

/** Whether `text` nests arrays and objects deeper than `max` (strings skipped; the text need not be valid JSON). */
function nestsDeeperThan(text: string, max: number): boolean {
  let depth = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22) {
      // Skip the string, escapes included.
      for (i++; i < text.length; i++) {
        const d = text.charCodeAt(i);
        if (d === 0x5c) i++;
        else if (d === 0x22) break;
      }
    } else if (c === 0x5b || c === 0x7b) {
      if (++depth > max) return true;
    } else if (c === 0x5d || c === 0x7d) {
      depth--;
    }
  }
  return false;
}

/** Whether a parsed JSON value nests arrays and objects deeper than `max` (the same count `nestsDeeperThan` makes). */
function valueNestsDeeperThan(value: unknown, max: number): boolean {
  if (typeof value !== 'object' || value === null) return false;
  if (max === 0) return true;
  for (const v of Array.isArray(value) ? value : Object.values(value))
    if (valueNestsDeeperThan(v, max - 1)) return true;
  return false;
}

function tooDeep(): KvgateError {
  return new KvgateError(
    'KVG_ERR_INVALID_REQUEST',
    `the request body nests arrays and objects deeper than ${MAX_JSON_DEPTH} levels`,
    { param: null },
  );
}

/**
 * The body text as a JSON object. The nesting bound is checked on the parsed value (JSON.parse itself does not
 * recurse), which costs one step per value rather than one per character of a large body; a body that does not
 * parse is scanned as text, so a deep one is refused for its depth first, whether or not it is valid JSON.
 * @throws KvgateError KVG_ERR_INVALID_REQUEST for nesting deeper than MAX_JSON_DEPTH or a lone surrogate escape
 *   (lone-surrogates.ts), KVG_ERR_INVALID_JSON.
 */
export function parseBodyObject(text: string): Record<string, unknown> {
  let body: Record<string, unknown>;
  try {
    body = parseJsonObject(text);
  } catch (err) {
    if (nestsDeeperThan(text, MAX_JSON_DEPTH)) throw tooDeep();
    throw err;
  }
  if (valueNestsDeeperThan(body, MAX_JSON_DEPTH)) throw tooDeep();
  refuseLoneSurrogates(text, body);
  return body;
}
