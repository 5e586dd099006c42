/**
 * Incremental Server-Sent Events parser over bytes.
 *
 * Contract: feed it response-body chunks as they arrive, split anywhere
 * (inside a line, between CR and LF, inside a multi-byte UTF-8 character);
 * it calls `onEvent` once per complete event, in order, and never holds more
 * than the current unfinished event. Per the SSE spec (WHATWG HTML, "event
 * stream interpretation"): a line ends in CRLF, LF or a bare CR, and a CR that
 * ends one chunk followed by an LF that starts the next is one CRLF; `:` lines
 * are comments, `data` lines join with "\n", a blank line dispatches, a block
 * without `data` is dropped, one space after the colon is stripped, a leading
 * UTF-8 BOM is skipped, and an event left unterminated when the stream ends is
 * discarded (`end()` reports its size; `holdsPartialEvent` says whether it was
 * part of an event rather than comments).
 *
 * `raw` is what a client is sent for the event, for zero-copy passthrough.
 * When the block's lines end in LF or CRLF it is the exact bytes of the event
 * block (comment lines of the same block and the terminating blank line
 * included): a view of the chunk when the block lies inside one, otherwise the
 * block's pieces concatenated once. A block with a bare-CR line end is not an
 * event to the many clients that split on LF, so its `raw` is a copy with
 * every line end (CR or CRLF) written as LF: the same event for a spec client,
 * a readable one for the others. One case is decided before its bytes are
 * seen: when the CR of a block's blank line ends a chunk and the block had no
 * bare CR before, the event goes out at once with that CR's LF added (exact
 * when the LF follows, as from an engine writing CRLF; a valid CRLF end when
 * it does not) instead of waiting for the next read.
 *
 * Cost: line ends are found with native `indexOf` scans, the next LF and the
 * next CR each remembered until passed, so a stream without CR costs one CR
 * scan per chunk; each input byte is copied at most twice (line assembly and
 * raw assembly across chunks), so a stream is parsed in linear time however it
 * is chunked. A chunk of ASCII bytes only (every engine's JSON chunks unless
 * the text itself is not ASCII) is decoded to a string once, and its lines'
 * values are slices of that string: one native decode per read instead of one
 * per line (a 64-event read made 64), with the same strings as a result
 * (ASCII decodes alike as Latin-1 and UTF-8).
 */
import { isAscii } from 'node:buffer';
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
const LF_BYTE = Buffer.from([LF]);

function asBuffer(chunk: Uint8Array): Buffer {
  return Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
}

/** A copy of an event block with every line end (bare CR or CRLF) written as LF (a CR never occurs inside an SSE line). */
function lfLineEnds(raw: Buffer): Buffer {
  const out = Buffer.allocUnsafe(raw.length);
  let o = 0;
  let from = 0;
  for (let cr = raw.indexOf(CR); cr !== -1; cr = raw.indexOf(CR, from)) {
    o += raw.copy(out, o, from, cr);
    out[o++] = LF;
    from = cr + 1 < raw.length && raw[cr + 1] === LF ? cr + 2 : cr + 1;
  }
  o += raw.copy(out, o, from);
  return out.subarray(0, o);
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
  /** The unfinished block has a field line (not only comments): cut short, it is a partial event. */
  #fields = false;
  /** The unfinished block has a bare-CR line end: its raw bytes are sent with LF line ends. */
  #bareCr = false;
  /** The last chunk ended with a CR line end: an LF starting the next chunk is part of it (one CRLF). */
  #afterCr = false;
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
   * Whether the unfinished block is part of an event: it has a field line (`data`, `event`, `id`, ...) or an
   * unfinished line that is not a comment. A stream that ends now was cut inside an event.
   */
  get holdsPartialEvent(): boolean {
    return this.#fields || (this.#lineParts.length > 0 && this.#lineParts[0]![0] !== COLON);
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
    if (len === 0) return;
    /** Start of the current event block within `buf` (meaningful when no earlier parts are held). */
    let blockStart = 0;
    let pos = this.#afterCr ? this.#crContinued(buf) : 0;
    if (pos === 1 && this.#blockParts.length === 0) blockStart = 1;
    // The chunk as one string when its lines' values can be sliced from it (see the file comment); a chunk of one
    // line or less keeps the per-line decode (nothing to share).
    const text = len > 256 && isAscii(buf) ? buf.toString('latin1', 0, len) : undefined;
    // The next LF and the next CR at or after `pos` (-1: none in this chunk; -2: not searched yet).
    let lf = -2;
    let cr = -2;
    while (pos < len) {
      if (lf < pos && lf !== -1) lf = buf.indexOf(LF, pos);
      if (cr < pos && cr !== -1) cr = buf.indexOf(CR, pos);
      let eol: number;
      let next: number;
      if (cr === -1 || (lf !== -1 && lf < cr)) {
        if (lf === -1) {
          const tail = buf.subarray(pos);
          this.#lineParts.push(tail);
          this.#lineBytes += tail.length;
          break;
        }
        eol = lf;
        next = lf + 1;
      } else {
        eol = cr;
        next = cr + 1;
        // A CR ending the chunk may be the first half of a CRLF: the next chunk tells (#crContinued).
        if (next === len) this.#afterCr = true;
        else if (buf[next] === LF) next++;
        else this.#bareCr = true;
      }
      if (this.#lineParts.length === 0) {
        // Fast path: the whole line is inside this chunk.
        if (eol === pos) {
          this.#dispatch(buf, blockStart, next);
          blockStart = next;
        } else {
          this.#line(buf, pos, eol, text);
        }
      } else {
        const head = buf.subarray(pos, eol);
        this.#lineParts.push(head);
        const line = Buffer.concat(this.#lineParts, this.#lineBytes + head.length);
        this.#lineParts = [];
        this.#lineBytes = 0;
        this.#line(line, 0, line.length);
      }
      pos = next;
    }
    if (blockStart < len) {
      const rest = buf.subarray(blockStart);
      this.#blockParts.push(rest);
      this.#blockBytes += rest.length;
      if (this.#blockBytes > this.#maxEventBytes) throw tooLarge(this.#maxEventBytes);
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
    this.#fields = this.#bareCr = this.#afterCr = false;
    return discarded;
  }

  /**
   * The last chunk ended with a CR line end: an LF starting `buf` completes it as CRLF (returns 1, where
   * parsing resumes); anything else makes it a bare CR, which counts for the unfinished block (returns 0).
   */
  #crContinued(buf: Buffer): number {
    this.#afterCr = false;
    if (buf[0] === LF) return 1;
    // The CR ended a line of the unfinished block (a blank line would have dispatched it).
    if (this.#blockParts.length > 0) this.#bareCr = true;
    return 0;
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

  /**
   * One non-empty line `buf[start, end)` of the current block (terminator excluded); `text`, when given, is all of
   * `buf` decoded (ASCII), so a value is a slice of it rather than a decode of its bytes.
   */
  #line(buf: Buffer, start: number, end: number, text?: string): void {
    const first = buf[start];
    if (first === COLON) return;
    this.#fields = true;
    // Field name runs to the first colon (or the whole line); value skips one space after it.
    // A byte loop, not indexOf: indexOf could run past the line into the rest of the chunk.
    let colon = start;
    while (colon < end && buf[colon] !== COLON) colon++;
    let valueStart = colon + 1;
    if (valueStart < end && buf[valueStart] === SPACE) valueStart++;
    if (valueStart > end) valueStart = end;
    const nameLen = colon - start;
    // Compare field names on bytes so only values become strings.
    if (
      nameLen === 4 &&
      first === 0x64 &&
      buf[start + 1] === 0x61 &&
      buf[start + 2] === 0x74 &&
      buf[start + 3] === 0x61
    ) {
      const value = text === undefined ? buf.toString('utf8', valueStart, end) : text.slice(valueStart, end);
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
    const rewrite = this.#bareCr;
    // A block without a bare CR whose blank line's CR ends the chunk: sent with the LF that follows it from an
    // engine writing CRLF (waiting for the next read to know would hold the event back).
    const completeCrLf = !rewrite && this.#afterCr;
    this.#data = this.#event = this.#id = undefined;
    this.#fields = this.#bareCr = false;
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
    if (raw.length > this.#maxEventBytes) throw tooLarge(this.#maxEventBytes);
    if (data === undefined) return;
    if (rewrite) raw = lfLineEnds(raw);
    else if (completeCrLf) raw = Buffer.concat([raw, LF_BYTE], raw.length + 1);
    this.#onEvent(raw, data, event, id);
  }
}

function tooLarge(maxEventBytes: number): KvgateError {
  return new KvgateError('KVG_ERR_ENGINE_BAD_RESPONSE', `SSE event exceeds ${maxEventBytes} bytes`, {
    maxEventBytes,
    violation: 'event_too_large',
  });
}
