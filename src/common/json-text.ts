/**
 * The JSON an object was parsed from, kept beside it so the object can be
 * sent on without serialising it again: a client's request body reaches its
 * engine as the bytes the client sent (plus the fields kvgate lays over it),
 * not as `JSON.stringify` of their parse, which costs time in proportion to
 * the prompt.
 *
 * Contract: `rememberJsonText(value, text)` only for a `value` that is
 * `JSON.parse(text)` of a JSON object text, and that nobody changes afterwards
 * (`rememberJsonBytes` likewise for the UTF-8 bytes that text was decoded from).
 * Request bodies are read-only past the frontend (a layer that needs another
 * body makes a new object: `withJsonMembers` keeps the JSON true for it), so
 * the JSON stays true. Kept in a WeakMap: it lives exactly as long as its object.
 *
 * With the top-level members (`jsonMembers`: each key and where its value
 * lies; `jsonByteMembers` as byte offsets), a body with members replaced,
 * added or removed is written by joining slices (`writeJsonWith`): what a
 * large body needs, whose members the main thread may never have parsed
 * (json-lazy.ts). A large body is remembered as the client's bytes, so it is
 * written as `Buffer.concat` of views of them and the few members kvgate
 * wrote: never decoded to text on the main thread, never encoded again.
 */

/**
 * One top-level member of a JSON object's text or UTF-8 bytes: its key, where the member begins (its key's quote) and
 * its value's [start, end), as offsets into that source (characters of a text, bytes of a buffer).
 */
export interface JsonMember {
  readonly key: string;
  readonly from: number;
  readonly start: number;
  readonly end: number;
}

/** A member kvgate wrote in place of the source's (or added): its key and its value's JSON text. */
interface WrittenMember {
  readonly key: string;
  readonly json: string;
}

type Part = JsonMember | WrittenMember;

interface Backing {
  /** The client's JSON: an object's text, or its UTF-8 bytes (a large body, never decoded on the main thread). */
  readonly source: string | Uint8Array;
  /**
   * Every top-level member once (the last value a duplicated key had, where the key first stood), in the order
   * JSON.parse keeps: slices of `source` or members written over it. Undefined: `source` is the object's whole text.
   */
  readonly parts?: readonly Part[] | undefined;
}

const texts = new WeakMap<object, Backing>();

/**
 * Remembers that `value` is the parse of `text` (an object's JSON text; whitespace around it is dropped), and
 * optionally its members (`jsonMembers(text)` with each key once, as `jsonSplice` writes them).
 */
export function rememberJsonText(value: object, text: string, members?: readonly JsonMember[]): void {
  texts.set(value, { source: text.charCodeAt(text.length - 1) === 0x7d ? text : text.trimEnd(), parts: members });
}

/**
 * Remembers that `value` is the parse of the UTF-8 JSON object in `bytes`, whose top-level members (byte offsets,
 * each key once: `jsonByteMembers`) are `members`. Contract: nobody writes to `bytes` afterwards.
 */
export function rememberJsonBytes(value: object, bytes: Uint8Array, members: readonly JsonMember[]): void {
  texts.set(value, { source: bytes, parts: members });
}

/** The JSON text `value` was parsed from (with the members laid over it since), if it was remembered as text. */
export function jsonTextOf(value: object): string | undefined {
  const b = texts.get(value);
  if (b === undefined || typeof b.source !== 'string') return undefined;
  return b.parts === undefined ? b.source : joinText(b.source, b.parts).text;
}

const isSpace = (c: number | undefined): boolean => c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09;

/** The index of the first byte at or after `i` that is not JSON white space (`b.length` at the end). */
export function skipJsonSpace(b: Uint8Array, i: number): number {
  while (i < b.length && isSpace(b[i])) i++;
  return i;
}

/**
 * The bytes being scanned, twice: a plain Uint8Array for element reads (monomorphic whatever the caller holds) and
 * a Buffer over the same memory for `indexOf`, which searches natively (memchr) where TypedArray's is a loop.
 */
interface Scan {
  readonly b: Uint8Array;
  readonly find: Buffer;
}

function scanOf(bytes: Uint8Array): Scan {
  return {
    b: new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength),
    find: Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength),
  };
}

/** The index after the closing quote of the string literal whose opening quote is at `i`. */
function stringEnd({ b, find }: Scan, i: number): number {
  let from = i + 1;
  for (;;) {
    const q = find.indexOf(0x22, from);
    if (q < 0) throw new SyntaxError('unterminated string in JSON text');
    let backslashes = 0;
    while (b[q - 1 - backslashes] === 0x5c) backslashes++;
    if (backslashes % 2 === 0) return q + 1;
    from = q + 1;
  }
}

/** The index after the JSON value that starts at `i`. */
function valueEnd(scan: Scan, i: number): number {
  const { b } = scan;
  const c = b[i];
  if (c === 0x22) return stringEnd(scan, i);
  if (c === 0x7b || c === 0x5b) {
    let depth = 0;
    for (let j = i; j < b.length; j++) {
      const d = b[j]!;
      if (d === 0x22) j = stringEnd(scan, j) - 1;
      else if (d === 0x7b || d === 0x5b) depth++;
      else if ((d === 0x7d || d === 0x5d) && --depth === 0) return j + 1;
    }
    throw new SyntaxError('unterminated array or object in JSON text');
  }
  let j = i;
  while (j < b.length) {
    const d = b[j];
    if (d === 0x2c || d === 0x7d || d === 0x5d || isSpace(d)) break;
    j++;
  }
  return j;
}

/**
 * The index after the JSON value whose first byte is at `i` in `bytes` (a string skipped by searching for its
 * closing quote). Contract: `bytes` are valid JSON.
 */
export function jsonValueEnd(bytes: Uint8Array, i: number): number {
  return valueEnd(scanOf(bytes), i);
}

/** UTF-8 bytes as text (they were checked when the body was read). */
function utf8(b: Uint8Array, start: number, end: number): string {
  return Buffer.from(b.buffer, b.byteOffset + start, end - start).toString('utf8');
}

/**
 * The top-level members of a JSON object's UTF-8 bytes, in order (a duplicated key appears each time), as byte
 * offsets; a leading byte order mark is skipped. Structural characters are ASCII and no byte of a multi-byte UTF-8
 * character is, so the scan reads bytes as a scan of the text reads characters; a string is skipped by searching
 * for its closing quote.
 * Contract: `bytes` are valid JSON; one pass over the bytes outside strings.
 * @throws SyntaxError for bytes that are not a JSON object (not every malformed text is noticed).
 */
function scanMembers(bytes: Uint8Array, readArray?: ArrayReader): JsonMember[] {
  const scan = scanOf(bytes);
  bytes = scan.b;
  const out: JsonMember[] = [];
  const bom = bytes[0] === 0xef && bytes[1] === 0xbb && bytes[2] === 0xbf ? 3 : 0;
  let i = skipJsonSpace(bytes, bom);
  if (bytes[i] !== 0x7b) throw new SyntaxError('not a JSON object text');
  i = skipJsonSpace(bytes, i + 1);
  if (bytes[i] === 0x7d) return out;
  for (;;) {
    if (bytes[i] !== 0x22) throw new SyntaxError('not a JSON object text');
    const from = i;
    const keyEnd = stringEnd(scan, i);
    const raw = utf8(bytes, i + 1, keyEnd - 1);
    const key = raw.includes('\\') ? (JSON.parse(`"${raw}"`) as string) : raw;
    // Past the colon to the value.
    const start = skipJsonSpace(bytes, skipJsonSpace(bytes, keyEnd) + 1);
    const end = (bytes[start] === 0x5b ? readArray?.(key, start) : undefined) ?? valueEnd(scan, start);
    out.push({ key, from, start, end });
    i = skipJsonSpace(bytes, end);
    if (bytes[i] !== 0x2c) return out;
    i = skipJsonSpace(bytes, i + 1);
  }
}

/**
 * The top-level members of a JSON object text, in text order (a duplicated key appears each time), as character
 * offsets. Contract: `text` is valid JSON (it has been parsed).
 * @throws SyntaxError for a text that is not a JSON object.
 */
export function jsonMembers(text: string): JsonMember[] {
  const bytes = Buffer.from(text, 'utf8');
  const members = scanMembers(bytes);
  if (bytes.length === text.length) return members;
  // Byte offsets to character offsets: the UTF-16 length of the bytes before each.
  const chars = (byte: number): number => utf8(bytes, 0, byte).length;
  return members.map((m) => ({ key: m.key, from: chars(m.from), start: chars(m.start), end: chars(m.end) }));
}

/**
 * A caller's own reader of a top-level member's array value (whose `[` is at `start`), run in place of the scan over
 * it: the index after its `]`, or undefined to have it scanned. How a prompt's ids are read in the same pass.
 */
export type ArrayReader = (key: string, start: number) => number | undefined;

/**
 * Where the elements of the JSON array whose `[` is at `start` in `bytes` end (the index after each), and the index
 * after its `]`: what a chat body's messages are split at to reuse a previous turn's (preprocess/body-reuse.ts).
 * Contract as `jsonByteMembers`: `bytes` are valid JSON (a member scan's reader sees them before any parse).
 * @throws SyntaxError for an array that is not terminated or not separated by commas.
 */
export function jsonArrayEnds(bytes: Uint8Array, start: number): { ends: number[]; end: number } {
  const scan = scanOf(bytes);
  const b = scan.b;
  const ends: number[] = [];
  let i = skipJsonSpace(b, start + 1);
  if (b[i] === 0x5d) return { ends, end: i + 1 };
  for (;;) {
    const e = valueEnd(scan, i);
    if (e === i) throw new SyntaxError('not a JSON array text');
    ends.push(e);
    i = skipJsonSpace(b, e);
    if (b[i] === 0x5d) return { ends, end: i + 1 };
    if (b[i] !== 0x2c) throw new SyntaxError('not a JSON array text');
    i = skipJsonSpace(b, i + 1);
  }
}

/** Each bytes object's members as its last scan found them: a body's bytes are scanned once, whoever asks again. */
const scanned = new WeakMap<Uint8Array, readonly JsonMember[]>();

/**
 * The top-level members of the UTF-8 JSON object in `bytes` (a leading byte order mark skipped), each key once, as
 * byte offsets: what `rememberJsonBytes` takes. `readArray` reads a member's array instead of the scan. Without it,
 * bytes already scanned (the same object) are not scanned again: a preprocessing thread's body scan serves its tools'
 * reading (python-json.ts).
 * Contract: `bytes` are valid JSON, and not written to afterwards; on other bytes the members are meaningless (or a
 * SyntaxError is thrown).
 * @throws SyntaxError for bytes that are not a JSON object.
 */
export function jsonByteMembers(bytes: Uint8Array, readArray?: ArrayReader): JsonMember[] {
  const known = readArray === undefined ? scanned.get(bytes) : undefined;
  if (known !== undefined) return [...known];
  const members = onceEachKey(scanMembers(bytes, readArray));
  scanned.set(bytes, members);
  return [...members];
}

/**
 * Each key once, as JSON.parse keeps a duplicated key: its last member, where the key first stood.
 */
function onceEachKey(members: readonly JsonMember[]): JsonMember[] {
  const last = new Map<string, JsonMember>();
  for (const m of members) last.set(m.key, m);
  return last.size === members.length ? [...members] : [...last.values()];
}

/** A field's JSON text: a bigint as an exact integer, undefined for what JSON.stringify leaves out (the member is removed). */
function fieldJson(value: unknown): string | undefined {
  return typeof value === 'bigint' ? value.toString() : (JSON.stringify(value) as string | undefined);
}

/**
 * `parts` (each key once) with `fields` laid over them: a field replaces its member where it stood, one set to
 * undefined removes it, the others follow in order. Only the fields' values are serialised.
 */
function spliceParts(parts: readonly Part[], fields: Readonly<Record<string, unknown>>): Part[] {
  const out: Part[] = [];
  const written = new Set<string>();
  const write = (key: string): void => {
    written.add(key);
    const json = fieldJson(fields[key]);
    if (json !== undefined) out.push({ key, json });
  };
  for (const p of parts) {
    if (Object.hasOwn(fields, p.key)) write(p.key);
    else out.push(p);
  }
  for (const key of Object.keys(fields)) if (!written.has(key)) write(key);
  return out;
}

const isWritten = (p: Part): p is WrittenMember => (p as Partial<WrittenMember>).json !== undefined;

/** The object text of `parts` over `source`, and where each member lies in it. */
function joinText(source: string, parts: readonly Part[]): { text: string; members: JsonMember[] } {
  const pieces: string[] = [];
  const members: JsonMember[] = [];
  let pos = 1;
  for (const p of parts) {
    if (pieces.length > 0) pos++;
    let piece: string;
    let valueOffset: number;
    if (isWritten(p)) {
      const k = JSON.stringify(p.key);
      piece = `${k}:${p.json}`;
      valueOffset = k.length + 1;
    } else {
      piece = source.slice(p.from, p.end);
      valueOffset = p.start - p.from;
    }
    members.push({ key: p.key, from: pos, start: pos + valueOffset, end: pos + piece.length });
    pieces.push(piece);
    pos += piece.length;
  }
  return { text: `{${pieces.join(',')}}`, members };
}

const OPEN = Buffer.from('{');
const COMMA = Buffer.from(',');
const CLOSE = Buffer.from('}');

/** The object's UTF-8 bytes from `parts` over `source`: views of the source and the written members, one copy. */
function joinBytes(source: Uint8Array, parts: readonly Part[]): Buffer {
  const list: Uint8Array[] = [OPEN];
  for (let i = 0; i < parts.length; i++) {
    const p = parts[i]!;
    if (i > 0) list.push(COMMA);
    list.push(
      isWritten(p) ? Buffer.from(`${JSON.stringify(p.key)}:${p.json}`, 'utf8') : source.subarray(p.from, p.end),
    );
  }
  list.push(CLOSE);
  return Buffer.concat(list);
}

/**
 * The object text of `members` (slices of `text`) with `fields` laid over them: a field replaces its member
 * where it stood, one set to undefined removes it, the others follow in order; a duplicated key is written
 * once, with its last value where it first stood (as JSON.parse keeps it). Returns the text and its members.
 */
export function jsonSplice(
  text: string,
  members: readonly JsonMember[],
  fields: Readonly<Record<string, unknown>> = {},
): {
  text: string;
  members: JsonMember[];
} {
  return joinText(text, spliceParts(onceEachKey(members), fields));
}

/**
 * The JSON of `value` as remembered with its members, `fields` laid over it (see `jsonSplice`): text for a value
 * remembered as text, UTF-8 bytes for one remembered as bytes (the client's bytes, sliced: never decoded or
 * serialised). Undefined when its members are not known.
 */
export function writeJsonWith(value: object, fields?: Readonly<Record<string, unknown>>): string | Buffer | undefined {
  const b = texts.get(value);
  if (b?.parts === undefined) return undefined;
  const parts = fields === undefined ? b.parts : spliceParts(b.parts, fields);
  return typeof b.source === 'string' ? joinText(b.source, parts).text : joinBytes(b.source, parts);
}

/** The JSON text of one member's value in `source` (a text, or UTF-8 bytes decoded here). */
export function jsonValueText(source: string | Uint8Array, m: JsonMember): string {
  if (typeof source === 'string') return source.slice(m.start, m.end);
  return Buffer.from(source.buffer, source.byteOffset + m.start, m.end - m.start).toString('utf8');
}

/**
 * A copy of `value` with `fields` laid over it (undefined removes a member), its JSON remembered when
 * `value`'s members are: the copy is written from slices of the source, never by serialising it.
 * The copy holds the same member values (a lazily parsed member stays unparsed). `value`'s own members only.
 */
export function withJsonMembers(
  value: Readonly<Record<string, unknown>>,
  fields: Readonly<Record<string, unknown>>,
): Record<string, unknown> {
  // By descriptor: a member read through a getter (json-lazy.ts) is copied unread.
  const copy = Object.defineProperties({}, Object.getOwnPropertyDescriptors(value)) as Record<string, unknown>;
  for (const key of Object.keys(fields)) {
    const v = fields[key];
    if (v === undefined) delete copy[key];
    else Object.defineProperty(copy, key, { value: v, writable: true, enumerable: true, configurable: true });
  }
  const b = texts.get(value);
  if (b?.parts !== undefined) texts.set(copy, { source: b.source, parts: spliceParts(b.parts, fields) });
  return copy;
}
