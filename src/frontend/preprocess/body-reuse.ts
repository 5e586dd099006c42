/**
 * An agent's chat body, parsed from where it stops repeating the last one.
 * Each turn resends the whole conversation: a 128k-token body is ~600 KB of
 * JSON, and decoding and parsing it all costs milliseconds a turn, while all
 * but the last few messages are byte for byte those of the previous turn.
 *
 * So a preprocessing thread keeps, per conversation (in its model's
 * conversation cache), the last body's bytes, where its conversation array
 * (`messages`; Responses' `input`) starts and where each message ends, and
 * the parsed messages. A new body is
 * compared with the kept one (a native memory comparison); every message that
 * ends before the first differing byte is taken as parsed, and only the rest
 * is decoded and parsed: the bytes before the array, `[`, then the bytes after
 * the last reused message and its comma.
 *
 * Exact by construction: both bodies share every byte up to the reused
 * messages' end, so the new body is valid JSON exactly when the shortened one
 * is (complete array elements followed by a comma can be dropped from an
 * array), and parses to the same object once the reused messages, equal as
 * values since their bytes are, are put back in front. A body with the array's
 * member twice (JSON.parse keeps the last) is parsed whole. Any failure of the
 * shortened parse falls back to parsing the whole body, which gives the error
 * the client should see. Contract: parsed messages are read-only past the
 * parse (request bodies are, json-text.ts), as a kept message is part of the
 * next turn's body too.
 */
import { jsonArrayEnds, skipJsonSpace, type ArrayReader } from '../../common/index.js';
import { commonPrefixBy } from './conversation-cache.js';
import { bodyText, parseBodyObject } from '../body.js';

/** A conversation's last chat body, as kept between its turns. */
export interface BodyEntry {
  /** A copy of the body's bytes (the task's own go back to the main thread). */
  readonly body: Buffer;
  readonly messages: MessagesSpan;
  /** The parsed messages, one per `messages.ends` entry. */
  readonly parsed: readonly unknown[];
}

/** Where a body's `messages` array lies in its bytes: its `[`, and the index after each element. */
export interface MessagesSpan {
  readonly start: number;
  readonly ends: readonly number[];
}

/** A body smaller than this is parsed whole and not kept: its parse costs less than keeping it. */
export const REUSE_MIN_BYTES = 64 * 1024;

/**
 * The member that holds a conversation in each endpoint's body: chat completions' and Anthropic Messages'
 * `messages`, OpenAI Responses' `input` (an array of items there; a string input is parsed whole).
 */
export function conversationMember(endpoint: string): string | undefined {
  if (endpoint === 'chat' || endpoint === 'route' || endpoint === 'messages') return 'messages';
  return endpoint === 'responses' ? 'input' : undefined;
}

/** Bytes at each end of a body's first two messages that key it (with their length). */
const KEY_EDGE_BYTES = 4096;

/**
 * A member scan's reader that notes where the `member` array's elements end (json-text.ts `ArrayReader`).
 * `span()` is undefined when the body has no such array, or the member more than once.
 */
export function messagesReader(
  bytes: Uint8Array,
  member: string,
): { read: ArrayReader; span: () => MessagesSpan | undefined } {
  let span: MessagesSpan | undefined;
  let seen = 0;
  const read: ArrayReader = (key, start) => {
    if (key !== member) return undefined;
    seen++;
    try {
      const { ends, end } = jsonArrayEnds(bytes, start);
      span = { start, ends };
      return end;
    } catch {
      // Not an array this reader can follow: the member scan goes over it (and the parse says what is wrong).
      span = undefined;
      return undefined;
    }
  };
  return { read, span: () => (seen === 1 ? span : undefined) };
}

/**
 * The key a body is kept under: the length of its first two messages and the bytes at both ends of them. An agent
 * app's sessions share a system prompt (often tens of KiB): the end of the second message, its first task, tells
 * them apart. Sessions with equal keys only take turns in one entry: what is reused is decided by the bytes.
 */
export function bodyKey(bytes: Uint8Array, span: MessagesSpan): string | undefined {
  const last = span.ends[Math.min(1, span.ends.length - 1)];
  if (last === undefined) return undefined;
  const text = (from: number, to: number): string =>
    Buffer.from(bytes.buffer, bytes.byteOffset + from, to - from).toString('latin1');
  const head = Math.min(last, span.start + KEY_EDGE_BYTES);
  return `${last - span.start}:${text(span.start, head)}${text(Math.max(head, last - KEY_EDGE_BYTES), last)}`;
}

/** How many of `span`'s first messages are byte for byte `kept`'s, at the same offsets. */
export function reusableMessages(kept: BodyEntry, bytes: Uint8Array, span: MessagesSpan): number {
  if (kept.messages.start !== span.start) return 0;
  const b = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const a = kept.body;
  const shared = commonPrefixBy(Math.min(a.length, b.length), (lo, hi) => a.compare(b, lo, hi, lo, hi) === 0);
  const was = kept.messages.ends;
  const now = span.ends;
  let k = 0;
  while (k < was.length && k < now.length && was[k] === now[k] && now[k]! <= shared) k++;
  return k;
}

/**
 * The body parsed with the first `reused` elements of its `member` array taken from `kept` (see the module comment);
 * undefined when the shortened body does not parse as the whole one would (the caller parses the whole body for its
 * error). The nesting bound is `parseBodyObject`'s: the kept messages were checked at the same depth.
 */
export function parseReusing(
  bytes: Uint8Array,
  member: string,
  span: MessagesSpan,
  kept: BodyEntry,
  reused: number,
): Record<string, unknown> | undefined {
  let i = skipJsonSpace(bytes, span.ends[reused - 1]!);
  if (bytes[i] === 0x2c) i++;
  else if (bytes[i] !== 0x5d) return undefined;
  try {
    const rest = parseBodyObject(bodyText(Buffer.concat([bytes.subarray(0, span.start + 1), bytes.subarray(i)])));
    const tail = rest[member];
    if (!Array.isArray(tail)) return undefined;
    rest[member] = kept.parsed.slice(0, reused).concat(tail);
    return rest;
  } catch {
    return undefined;
  }
}

/**
 * What to keep of a parsed body for its conversation's next turn: a copy of its bytes, or the bytes themselves when
 * `own` (the thread holds their buffer and does not hand it back).
 */
export function bodyEntry(
  bytes: Uint8Array,
  span: MessagesSpan,
  messages: readonly unknown[],
  own: boolean,
): BodyEntry | undefined {
  if (messages.length !== span.ends.length) return undefined;
  const body = own ? Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength) : Buffer.from(bytes);
  return { body, messages: span, parsed: messages };
}
