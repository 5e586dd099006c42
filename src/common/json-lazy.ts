/**
 * A large JSON object whose big members the main thread does not parse.
 *
 * Why: a request body of megabytes (100,000 messages, deep tool schemas, long
 * token arrays) costs tens to hundreds of milliseconds to parse, and as much
 * again to clone from a worker thread; either would hold the gateway's event
 * loop. A worker parses it and sends back its members (json-text.ts: where
 * each lies in the client's bytes, which the main thread keeps) and, per
 * member, either the value (a light one: a scalar, a short string, or a small
 * array or object within a shared budget) or an outline (a heavy one). The
 * main thread's object holds the light values and, for each heavy array or
 * object, a stand-in that answers what routing reads of it from the outline
 * (an array's length, an object's scalar members) and parses its slice of
 * the bytes on any other access; a heavy string is a getter that parses its
 * slice when read. So the object reads as the parse of its JSON, and writing
 * it (json-text.ts) joins slices of the bytes.
 *
 * Contract: a stand-in is a Proxy; it is never posted to another thread
 * (structured clone refuses proxies), and nothing writes to it. A copy keeps
 * the getters unread when made with `withJsonMembers`.
 */
import { jsonValueText, rememberJsonBytes, rememberJsonText, type JsonMember } from './json-text.js';

export type JsonScalar = string | number | boolean | null;

/** What a heavy member's stand-in answers without parsing it. */
export type JsonOutline =
  | { readonly kind: 'array'; readonly length: number }
  /** `scalars`: the object's scalar members (short strings, numbers, booleans, null) when it has few members; absent otherwise. */
  | { readonly kind: 'object'; readonly scalars?: Readonly<Record<string, JsonScalar>> | undefined }
  | { readonly kind: 'string' };

/** A member whose value's JSON is longer than this (characters of a text, bytes of UTF-8) is heavy. */
const LIGHT_MEMBER_CHARS = 4096;
/** The light arrays and objects of one body, together, in characters (or bytes) of JSON; members past it are heavy. */
const LIGHT_BUDGET_CHARS = 64 * 1024;
/** An object with more members than this gets no `scalars` in its outline. */
const OUTLINE_MAX_KEYS = 32;
/** A string member longer than this is not an outline scalar. */
const OUTLINE_MAX_STRING = 256;

/** Sets an own data property, `__proto__` included (as JSON.parse does). */
function setOwn(obj: Record<string, unknown>, key: string, value: unknown): void {
  if (key === '__proto__')
    Object.defineProperty(obj, key, { value, writable: true, enumerable: true, configurable: true });
  else obj[key] = value;
}

function isScalar(v: unknown): v is JsonScalar {
  return (
    v === null ||
    typeof v === 'number' ||
    typeof v === 'boolean' ||
    (typeof v === 'string' && v.length <= OUTLINE_MAX_STRING)
  );
}

function outlineOf(value: object): JsonOutline {
  if (Array.isArray(value)) return { kind: 'array', length: value.length };
  // A prompt's ids read from the body's bytes (wasm's jsonIdArray) stand for the JSON array of numbers they were.
  if (ArrayBuffer.isView(value)) return { kind: 'array', length: (value as Uint32Array).length };
  const keys = Object.keys(value);
  if (keys.length > OUTLINE_MAX_KEYS) return { kind: 'object' };
  const scalars: Record<string, JsonScalar> = {};
  for (const k of keys) {
    const v = (value as Record<string, unknown>)[k];
    if (isScalar(v)) setOwn(scalars, k, v);
  }
  return { kind: 'object', scalars };
}

/**
 * The worker's half: `value` (the parse of the JSON whose `members` these are, each key once) split into the
 * values sent whole and the outlines of its heavy members.
 */
export function outlineJsonObject(
  value: Readonly<Record<string, unknown>>,
  members: readonly JsonMember[],
): {
  light: Record<string, unknown>;
  outlines: Record<string, JsonOutline>;
} {
  const light: Record<string, unknown> = {};
  const outlines: Record<string, JsonOutline> = {};
  let budget = LIGHT_BUDGET_CHARS;
  for (const m of members) {
    const v = value[m.key];
    const chars = m.end - m.start;
    const container = typeof v === 'object' && v !== null;
    if (chars <= LIGHT_MEMBER_CHARS && (!container || chars <= budget)) {
      if (container) budget -= chars;
      setOwn(light, m.key, v);
    } else if (typeof v === 'string') {
      setOwn(outlines, m.key, { kind: 'string' });
    } else if (container) {
      setOwn(outlines, m.key, outlineOf(v));
    } else {
      // A number of more than LIGHT_MEMBER_CHARS digits: as cheap to send as any scalar.
      setOwn(light, m.key, v);
    }
  }
  return { light, outlines };
}

/** The stand-in of one heavy array or object: the outline's answers, else the parse of its slice (made once). */
function standIn(
  source: string | Uint8Array,
  m: JsonMember,
  outline: Exclude<JsonOutline, { kind: 'string' }>,
): object {
  let parsed: object | undefined;
  const real = (): object => (parsed ??= JSON.parse(jsonValueText(source, m)) as object);
  const scalars = outline.kind === 'object' ? outline.scalars : undefined;
  return new Proxy(outline.kind === 'array' ? [] : {}, {
    get(_target, key) {
      if (parsed === undefined && typeof key === 'string') {
        if (outline.kind === 'array' && key === 'length') return outline.length;
        if (scalars !== undefined && Object.hasOwn(scalars, key)) return scalars[key];
      }
      return Reflect.get(real(), key);
    },
    has: (_target, key) => Reflect.has(real(), key),
    ownKeys: () => Reflect.ownKeys(real()),
    getOwnPropertyDescriptor: (_target, key) => Reflect.getOwnPropertyDescriptor(real(), key),
    set: (_target, key, v) => Reflect.set(real(), key, v),
    defineProperty: (_target, key, d) => Reflect.defineProperty(real(), key, d),
    deleteProperty: (_target, key) => Reflect.deleteProperty(real(), key),
  });
}

/**
 * The main thread's half: the object whose JSON is `source` (its text, or the UTF-8 bytes the worker decoded; the
 * members' offsets into it, each key once), from the worker's `outlineJsonObject`; its JSON and members remembered
 * (json-text.ts). Bytes are decoded only for a heavy member something reads.
 */
export function lazyJsonObject(
  source: string | Uint8Array,
  members: readonly JsonMember[],
  light: Readonly<Record<string, unknown>>,
  outlines: Readonly<Record<string, JsonOutline>>,
): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const m of members) {
    const outline = Object.hasOwn(outlines, m.key) ? outlines[m.key] : undefined;
    if (outline?.kind === 'string') {
      let parsed: string | undefined;
      const get = (): string => (parsed ??= JSON.parse(jsonValueText(source, m)) as string);
      Object.defineProperty(out, m.key, { get, enumerable: true, configurable: true });
    } else {
      setOwn(out, m.key, outline !== undefined ? standIn(source, m, outline) : light[m.key]);
    }
  }
  if (typeof source === 'string') rememberJsonText(out, source, members);
  else rememberJsonBytes(out, source, members);
  return out;
}
