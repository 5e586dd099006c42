/**
 * One SSE event of an engine's stream, parsed only as far as someone asks.
 *
 * The data's JSON is parsed on first access of `json`. What a request guard
 * reads of a chunk (`info`: output, token ids, finish reason, usage) is read
 * once, and for most chunks of a stream without parsing them: engines send
 * the same chunk again and again with only the generated text changed, so
 * each stream keeps the shape of one parsed chunk (`ChunkShape`) and a later
 * chunk that is that shape with another text is known to read the same.
 *
 * Why that is exact: the shape is a parsed chunk's data split around the
 * value of a `"content"` or `"text"` member (found after `{` or `,`, so it is
 * a member of an object, not text inside a string). A chunk that is the same
 * prefix and suffix around a non-empty value with no quote, backslash or
 * control character is valid JSON of the same structure, and differs only in
 * that one string's value, non-empty in both. `readChunkInfo` reads strings
 * only for being non-empty, except `finish_reason` and `error`; a shape is
 * learned only from a chunk with neither, with no usage, and with no token
 * ids anywhere (so a migration's record of the chunk does not change either).
 */
import type { EngineEvent } from './engine-stream.js';
import { readChunkInfo, type ChunkInfo } from './openai-chunk.js';
import { cutPromptIds, type PromptIdsCut } from './prompt-ids.js';

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const OPEN_BRACE = 0x7b;
const COMMA = 0x2c;
const VALUE_KEYS = ['"content":"', '"text":"'];

/** The learned shape of one stream's plain chunks. */
export class ChunkShape {
  #prefix: string | undefined;
  #suffix = '';
  #info: ChunkInfo | undefined;

  /** The shape's info when `data` is the shape around another non-empty plain value; undefined otherwise. */
  match(data: string): ChunkInfo | undefined {
    const prefix = this.#prefix;
    if (prefix === undefined) return undefined;
    const end = data.length - this.#suffix.length;
    // Slices compared with ===: cheaper than startsWith/endsWith here (measured).
    if (end <= prefix.length || data.slice(0, prefix.length) !== prefix || data.slice(end) !== this.#suffix)
      return undefined;
    for (let i = prefix.length; i < end; i++) {
      const c = data.charCodeAt(i);
      if (c === QUOTE || c === BACKSLASH || c < 0x20) return undefined;
    }
    return this.#info;
  }

  /** Takes `data` (whose parsed info is `info`) as the stream's shape when it qualifies (see the file comment). */
  learn(data: string, info: ChunkInfo): void {
    if (
      info.outputChoices === 0 ||
      info.tokenIds !== undefined ||
      info.finishReason !== undefined ||
      info.usage !== undefined ||
      info.error !== undefined
    )
      return;
    if (data.includes('token_ids')) return;
    for (const key of VALUE_KEYS) {
      const at = data.lastIndexOf(key);
      if (at <= 0) continue;
      const before = data.charCodeAt(at - 1);
      if (before !== OPEN_BRACE && before !== COMMA) continue;
      const start = at + key.length;
      let end = start;
      while (end < data.length) {
        const c = data.charCodeAt(end);
        if (c === QUOTE) break;
        end += c === BACKSLASH ? 2 : 1;
      }
      if (end === start || end >= data.length) return;
      this.#prefix = ownString(data.slice(0, start));
      this.#suffix = ownString(data.slice(end));
      this.#info = info;
      return;
    }
  }
}

/**
 * A copy of `s` that holds no larger string. A slice of a string can be a view that keeps the whole string alive,
 * and an event's data is a slice of its whole upstream read (sse-parser.ts): the shape, kept for the stream's
 * life, must not keep a read of up to 64 KB per stream. Called once or twice per stream. A concatenation read
 * by `slice` is flattened into a new string first (V8 flattens before it slices), and the slice's parent is
 * that new string, so the copy keeps one character more than `s` and nothing of the read; half the cost of a
 * JSON round trip.
 */
function ownString(s: string): string {
  return (' ' + s).slice(1);
}

const UNREAD = Symbol('unread');

/** An event of an `EngineEventStream`: `json` and `info` are computed on first access. */
export class StreamEvent implements EngineEvent {
  readonly raw: Buffer;
  readonly data: string;
  readonly event: string | undefined;
  readonly id: string | undefined;
  readonly done: boolean;
  readonly #shape: ChunkShape;
  #json: unknown = UNREAD;
  #lean: unknown = UNREAD;
  #cut: PromptIdsCut | undefined;
  #info: ChunkInfo | undefined | typeof UNREAD = UNREAD;
  #plain = false;

  constructor(raw: Buffer, data: string, event: string | undefined, id: string | undefined, shape: ChunkShape) {
    this.raw = raw;
    this.data = data;
    this.event = event;
    this.id = id;
    this.done = data === '[DONE]';
    this.#shape = shape;
  }

  get json(): unknown {
    if (this.#json === UNREAD) {
      try {
        this.#json = this.done ? undefined : JSON.parse(this.data);
      } catch {
        this.#json = undefined;
      }
    }
    return this.#json;
  }

  /**
   * The JSON of the data less its top-level `prompt_token_ids` (prompt-ids.ts), which the guard and a migration's
   * record never need parsed: `json` itself when the data has no such member to cut.
   */
  get lean(): unknown {
    if (this.#lean === UNREAD) {
      this.#cut = this.done || this.#json !== UNREAD ? undefined : cutPromptIds(this.data);
      if (this.#cut === undefined) this.#lean = this.json;
      else {
        try {
          this.#lean = JSON.parse(this.#cut.rest);
        } catch {
          this.#lean = undefined;
        }
      }
    }
    return this.#lean;
  }

  /** The text of the top-level `prompt_token_ids` that `lean` left out; undefined when it left nothing out. */
  get cutPromptIds(): string | undefined {
    return this.lean === undefined ? undefined : this.#cut?.ids;
  }

  /** `readChunkInfo(json)`; undefined for `[DONE]` and for data that is not JSON. */
  get info(): ChunkInfo | undefined {
    if (this.#info === UNREAD) this.#read();
    return this.#info as ChunkInfo | undefined;
  }

  /** True when `info` came from the stream's shape: the chunk is an earlier one's with another text. */
  get plain(): boolean {
    if (this.#info === UNREAD) this.#read();
    return this.#plain;
  }

  #read(): void {
    if (this.done) {
      this.#info = undefined;
      return;
    }
    const shaped = this.#shape.match(this.data);
    if (shaped !== undefined) {
      this.#info = shaped;
      this.#plain = true;
      return;
    }
    const json = this.lean;
    const info = json === undefined ? undefined : readChunkInfo(json);
    this.#info = info;
    if (info !== undefined) this.#shape.learn(this.data, info);
  }
}

/** What a guard reads of an event: `readChunkInfo` of its JSON, once per event; undefined for `[DONE]` and non-JSON data. */
export function eventInfo(ev: EngineEvent): ChunkInfo | undefined {
  if (ev instanceof StreamEvent) return ev.info;
  return ev.done || ev.json === undefined ? undefined : readChunkInfo(ev.json);
}

/**
 * True when the event is a plain chunk of its stream: the shape of an earlier chunk of the same stream, only a
 * non-empty text differing (see the file comment), so whoever recorded that chunk has nothing new to record.
 */
export function isPlainChunk(ev: EngineEvent): boolean {
  return ev instanceof StreamEvent && ev.plain;
}

/** What a stream's recorder reads of an event: its `lean` JSON and the `prompt_token_ids` text cut from it, if any. */
export function leanChunk(ev: EngineEvent): { readonly json: unknown; readonly cutPromptIds: string | undefined } {
  if (ev instanceof StreamEvent) return { json: ev.lean, cutPromptIds: ev.cutPromptIds };
  return { json: ev.json, cutPromptIds: undefined };
}
