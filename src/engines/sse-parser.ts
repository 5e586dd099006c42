/**
 * Incremental Server-Sent Events parser over bytes.
 *
 * Contract: feed it response-body chunks as they arrive, split anywhere
 * (inside a line, between CR and LF, inside a multi-byte UTF-8 character);
 * it calls `onEvent` once per complete event, in order, and never holds more
 * than the current unfinished event. Lines end in LF or CRLF (a bare CR is not
 * a line end: no engine emits one, and supporting it would cost a second scan
 * per line). Per the SSE spec: `:` lines are comments, `data` lines join with
 * "\n", a blank line dispatches, a block without `data` is dropped, one space
 * after the colon is stripped, a leading UTF-8 BOM is skipped, and an event
 * left unterminated when the stream ends is discarded (`end()` reports its size).
 *
 * `raw` is the exact bytes of the event block (comment lines of the same block
 * and the terminating blank line included), for zero-copy passthrough: when
 * the block lies inside one chunk it is a view of that chunk, otherwise the
 * block's pieces are concatenated once. Each input byte is copied at most
 * twice (line assembly and raw assembly across chunks), so a stream is parsed
 * in linear time however it is chunked.
 */
import { KvgateError } from '../errors/index.js';

/** Called once per dispatched event. `event` and `id` are undefined when the block had no such field. */
export type SseEventHandler = (raw: Buffer, data: string, event: string | undefined, id: string | undefined) => void;

export interface SseParserOptions {
  /** Largest event block accepted, in bytes; a larger one throws KVG_ERR_ENGINE_BAD_RESPONSE. Default 16 MiB. */
  maxEventBytes?: number;
}

const LF = 0x0a;
const CR = 0x0d;
const COLON = 0x3a;
const SPACE = 0x20;
const DEFAULT_MAX_EVENT_BYTES = 16 * 1024 * 1024;

function asBuffer(chunk: Uint8Array): Buffer {
  return Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
}

export class SseParser {
  readonly #onEvent: SseEventHandler;
  readonly #maxEventBytes: number;
  /** Pieces of the unfinished event block from earlier chunks (views, not copies). */
  #blockParts: Buffer[] = [];
  #blockBytes = 0;
  /** Pieces of the unfinished line; always the tail of the block. */
  #lineParts: Buffer[] = [];
  #lineBytes = 0;
  #data: string | undefined = undefined;
  #event: string | undefined = undefined;
  #id: string | undefined = undefined;
  /** True until the first line was seen, for BOM stripping. */
  #atStart = true;
  /** Bytes held at the start for a BOM split across the first chunks. */
  #bomCarry: Buffer | undefined = undefined;

  constructor(onEvent: SseEventHandler, options: SseParserOptions = {}) {
    this.#onEvent = onEvent;
    this.#maxEventBytes = options.maxEventBytes ?? DEFAULT_MAX_EVENT_BYTES;
  }

  /** Bytes held for the unfinished event. */
  get pendingBytes(): number {
    return this.#blockBytes;
  }

  /**
   * Parses one chunk, calling the handler for each event it completes.
   * @throws KvgateError KVG_ERR_ENGINE_BAD_RESPONSE when an event block exceeds `maxEventBytes`.
   */
  push(chunk: Uint8Array): void {
    let buf = asBuffer(chunk);
    if (this.#atStart) {
      const stripped = this.#stripBom(buf);
      if (stripped === undefined) return;
      buf = stripped;
    }
    const len = buf.length;
    let pos = 0;
    /** Start of the current event block within `buf` (meaningful when no earlier parts are held). */
    let blockStart = 0;
    while (pos < len) {
      const nl = buf.indexOf(LF, pos);
      if (nl === -1) {
        const tail = buf.subarray(pos);
        this.#lineParts.push(tail);
        this.#lineBytes += tail.length;
        break;
      }
      if (this.#lineParts.length === 0) {
        // Fast path: the whole line is inside this chunk.
        let end = nl;
        if (end > pos && buf[end - 1] === CR) end--;
        if (end === pos) {
          this.#dispatch(buf, blockStart, nl + 1);
          blockStart = nl + 1;
        } else {
          this.#line(buf, pos, end);
        }
      } else {
        const head = buf.subarray(pos, nl);
        this.#lineParts.push(head);
        const line = Buffer.concat(this.#lineParts, this.#lineBytes + head.length);
        this.#lineParts = [];
        this.#lineBytes = 0;
        let end = line.length;
        if (end > 0 && line[end - 1] === CR) end--;
        if (end === 0) {
          this.#dispatch(buf, blockStart, nl + 1);
          blockStart = nl + 1;
        } else {
          this.#line(line, 0, end);
        }
      }
      pos = nl + 1;
    }
    if (blockStart < len) {
      const rest = buf.subarray(blockStart);
      this.#blockParts.push(rest);
      this.#blockBytes += rest.length;
      if (this.#blockBytes > this.#maxEventBytes) {
        throw new KvgateError('KVG_ERR_ENGINE_BAD_RESPONSE', `SSE event exceeds ${this.#maxEventBytes} bytes`, {
          maxEventBytes: this.#maxEventBytes,
        });
      }
    }
  }

  /**
   * Ends the stream: an unterminated event is discarded (SSE semantics).
   * Returns the number of bytes discarded, 0 when the stream ended on an event boundary.
   */
  end(): number {
    const discarded = this.#blockBytes + (this.#bomCarry?.length ?? 0);
    this.#blockParts = [];
    this.#blockBytes = 0;
    this.#lineParts = [];
    this.#lineBytes = 0;
    this.#bomCarry = undefined;
    this.#data = this.#event = this.#id = undefined;
    return discarded;
  }

  /** Returns the chunk without a leading BOM, or undefined when more bytes are needed to decide. */
  #stripBom(buf: Buffer): Buffer | undefined {
    if (this.#bomCarry !== undefined) {
      buf = Buffer.concat([this.#bomCarry, buf]);
      this.#bomCarry = undefined;
    }
    const n = Math.min(buf.length, 3);
    const bom = [0xef, 0xbb, 0xbf];
    for (let i = 0; i < n; i++) {
      if (buf[i] !== bom[i]) {
        this.#atStart = false;
        return buf;
      }
    }
    if (buf.length < 3) {
      this.#bomCarry = buf;
      return undefined;
    }
    this.#atStart = false;
    return buf.subarray(3);
  }

  /** One non-empty line `buf[start, end)` of the current block (terminator excluded). */
  #line(buf: Buffer, start: number, end: number): void {
    const first = buf[start];
    if (first === COLON) return;
    // Field name runs to the first colon (or the whole line); value skips one space after it.
    // A byte loop, not indexOf: indexOf could run past the line into the rest of the chunk.
    let colon = start;
    while (colon < end && buf[colon] !== COLON) colon++;
    let valueStart = colon + 1;
    if (valueStart < end && buf[valueStart] === SPACE) valueStart++;
    if (valueStart > end) valueStart = end;
    const nameLen = colon - start;
    // Compare field names on bytes so only values become strings.
    if (nameLen === 4 && first === 0x64 && buf[start + 1] === 0x61 && buf[start + 2] === 0x74 && buf[start + 3] === 0x61) {
      const value = buf.toString('utf8', valueStart, end);
      this.#data = this.#data === undefined ? value : `${this.#data}\n${value}`;
    } else if (nameLen === 5 && buf.toString('latin1', start, colon) === 'event') {
      this.#event = buf.toString('utf8', valueStart, end);
    } else if (nameLen === 2 && first === 0x69 && buf[start + 1] === 0x64) {
      const value = buf.toString('utf8', valueStart, end);
      if (!value.includes('\0')) this.#id = value;
    }
    // `retry` and unknown fields are ignored, as the spec says.
  }

  /** The blank line ending at `buf[lineEnd - 1]` closes the block that started at `buf[blockStart]` (or earlier). */
  #dispatch(buf: Buffer, blockStart: number, lineEnd: number): void {
    const data = this.#data;
    const event = this.#event;
    const id = this.#id;
    this.#data = this.#event = this.#id = undefined;
    let raw: Buffer;
    if (this.#blockParts.length === 0) {
      raw = buf.subarray(blockStart, lineEnd);
    } else {
      const head = buf.subarray(0, lineEnd);
      this.#blockParts.push(head);
      raw = data === undefined ? head : Buffer.concat(this.#blockParts, this.#blockBytes + head.length);
      this.#blockParts = [];
      this.#blockBytes = 0;
    }
    if (raw.length > this.#maxEventBytes) {
      throw new KvgateError('KVG_ERR_ENGINE_BAD_RESPONSE', `SSE event exceeds ${this.#maxEventBytes} bytes`, {
        maxEventBytes: this.#maxEventBytes,
      });
    }
    if (data !== undefined) this.#onEvent(raw, data, event, id);
  }
}
