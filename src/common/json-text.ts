/**
 * The JSON text an object was parsed from, kept beside it so the object can
 * be sent on without serialising it again: a client's request body reaches
 * its engine as the bytes the client sent (plus the fields kvgate appends),
 * not as `JSON.stringify` of their parse, which costs time in proportion to
 * the prompt.
 *
 * Contract: `rememberJsonText(value, text)` only for a `value` that is
 * `JSON.parse(text)` of a JSON object text, and that nobody changes afterwards.
 * Request bodies are read-only past the frontend (a layer that needs another
 * body makes a new object: `withJsonMembers` keeps the text true for it), so
 * the text stays true. Kept in a WeakMap: it lives exactly as long as its object.
 *
 * With the text's top-level members (`jsonMembers`: each key and where its
 * value lies), a body with members replaced, added or removed is written by
 * joining slices of the text (`jsonTextWith`): what a large body needs, whose
 * members the main thread may never have parsed (json-lazy.ts).
 */

/** One top-level member of a JSON object text: its key, where the member begins (its key's quote) and its value's [start, end). */
export interface JsonMember {
  readonly key: string;
  readonly from: number;
  readonly start: number;
  readonly end: number;
}

interface Backing {
  readonly text: string;
  /** Every top-level member, each key once (the last value a duplicated key had), in the order JSON.parse keeps. */
  readonly members?: readonly JsonMember[] | undefined;
}

const texts = new WeakMap<object, Backing>();

/**
 * Remembers that `value` is the parse of `text` (an object's JSON text; whitespace around it is dropped), and
 * optionally its members (`jsonMembers(text)` with each key once, as `jsonSplice` writes them).
 */
export function rememberJsonText(value: object, text: string, members?: readonly JsonMember[]): void {
  texts.set(value, { text: text.charCodeAt(text.length - 1) === 0x7d ? text : text.trimEnd(), members });
}

/** The JSON text `value` was parsed from, if it was remembered; undefined otherwise. */
export function jsonTextOf(value: object): string | undefined {
  return texts.get(value)?.text;
}

const isSpace = (c: number): boolean => c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09;

function skipSpace(text: string, i: number): number {
  while (i < text.length && isSpace(text.charCodeAt(i))) i++;
  return i;
}

/** The index after the closing quote of the string literal whose opening quote is at `i`. */
function stringEnd(text: string, i: number): number {
  let from = i + 1;
  for (;;) {
    const q = text.indexOf('"', from);
    if (q < 0) throw new SyntaxError('unterminated string in JSON text');
    let backslashes = 0;
    while (text.charCodeAt(q - 1 - backslashes) === 0x5c) backslashes++;
    if (backslashes % 2 === 0) return q + 1;
    from = q + 1;
  }
}

/** The index after the JSON value that starts at `i`. */
function valueEnd(text: string, i: number): number {
  const c = text.charCodeAt(i);
  if (c === 0x22) return stringEnd(text, i);
  if (c === 0x7b || c === 0x5b) {
    let depth = 0;
    for (let j = i; j < text.length; j++) {
      const d = text.charCodeAt(j);
      if (d === 0x22) j = stringEnd(text, j) - 1;
      else if (d === 0x7b || d === 0x5b) depth++;
      else if ((d === 0x7d || d === 0x5d) && --depth === 0) return j + 1;
    }
    throw new SyntaxError('unterminated array or object in JSON text');
  }
  let j = i;
  while (j < text.length) {
    const d = text.charCodeAt(j);
    if (d === 0x2c || d === 0x7d || d === 0x5d || isSpace(d)) break;
    j++;
  }
  return j;
}

/**
 * The top-level members of a JSON object text, in text order (a duplicated key appears each time).
 * Contract: `text` is valid JSON (it has been parsed); one pass over its characters.
 * @throws SyntaxError for a text that is not a JSON object.
 */
export function jsonMembers(text: string): JsonMember[] {
  const out: JsonMember[] = [];
  let i = skipSpace(text, 0);
  if (text.charCodeAt(i) !== 0x7b) throw new SyntaxError('not a JSON object text');
  i = skipSpace(text, i + 1);
  if (text.charCodeAt(i) === 0x7d) return out;
  for (;;) {
    const from = i;
    const keyEnd = stringEnd(text, i);
    const raw = text.slice(i + 1, keyEnd - 1);
    const key = raw.includes('\\') ? (JSON.parse(text.slice(i, keyEnd)) as string) : raw;
    // Past the colon to the value.
    const start = skipSpace(text, skipSpace(text, keyEnd) + 1);
    const end = valueEnd(text, start);
    out.push({ key, from, start, end });
    i = skipSpace(text, end);
    if (text.charCodeAt(i) !== 0x2c) return out;
    i = skipSpace(text, i + 1);
  }
}

/** A field's JSON text: a bigint as an exact integer, undefined for what JSON.stringify leaves out (the member is removed). */
function fieldJson(value: unknown): string | undefined {
  return typeof value === 'bigint' ? value.toString() : (JSON.stringify(value) as string | undefined);
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
  const last = new Map<string, JsonMember>();
  for (const m of members) last.set(m.key, m);
  const parts: string[] = [];
  const out: JsonMember[] = [];
  let pos = 1;
  const push = (key: string, part: string, valueOffset: number): void => {
    if (parts.length > 0) pos++;
    out.push({ key, from: pos, start: pos + valueOffset, end: pos + part.length });
    parts.push(part);
    pos += part.length;
  };
  const written = new Set<string>();
  const writeField = (key: string): void => {
    written.add(key);
    const json = fieldJson(fields[key]);
    if (json === undefined) return;
    const k = JSON.stringify(key);
    push(key, `${k}:${json}`, k.length + 1);
  };
  for (const [key, m] of last) {
    if (Object.hasOwn(fields, key)) writeField(key);
    else push(key, text.slice(m.from, m.end), m.start - m.from);
  }
  for (const key of Object.keys(fields)) if (!written.has(key)) writeField(key);
  return { text: `{${parts.join(',')}}`, members: out };
}

/** The remembered text of `value` with `fields` laid over it (see `jsonSplice`); undefined when its members are not known. */
export function jsonTextWith(value: object, fields: Readonly<Record<string, unknown>>): string | undefined {
  const b = texts.get(value);
  return b?.members === undefined ? undefined : jsonSplice(b.text, b.members, fields).text;
}

/**
 * A copy of `value` with `fields` laid over it (undefined removes a member), its text remembered when
 * `value`'s members are: the copy is written by joining slices of the text, never by serialising it.
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
  if (b?.members !== undefined) {
    const spliced = jsonSplice(b.text, b.members, fields);
    texts.set(copy, spliced);
  }
  return copy;
}
