/**
 * JSON as vLLM's Python front end writes it. vLLM turns a Messages `tool_use` block's `input` into its tool call's
 * arguments with `json.dumps` (`", "` and `": "` separators, `ensure_ascii=False`), and its chat layer hands the
 * template those arguments as `json.loads` gives them: each number keeps the kind its literal had (`1.0` a float,
 * written `1.0`; `12345678901234567890` an exact int), which JSON.parse loses. So where a number's Python text
 * matters, the request's own literal is read (`readJson`) and written as Python writes it (`pythonNumberText`).
 */
import { BytesMemo } from './bytes-memo.js';
import { jsonByteMembers, jsonValueEnd, skipJsonSpace } from './json-text.js';

/** A number as its JSON literal, read where the literal decides what Python writes (`pythonJson` writes it so). */
class JsonNumberLiteral {
  constructor(readonly literal: string) {}
}

/**
 * A float as Python's `repr(float)` (and so `json.dumps`) writes it: the shortest digits that round-trip (what
 * `toExponential()` gives), positional when the decimal exponent is in [-4, 16) with at least one digit after the
 * point, else `d.ddde±XX` (a sign, at least two exponent digits); `-0.0`; `Infinity` / `NaN` as `json.dumps` writes
 * an overflowed literal's value.
 */
export function pythonFloatText(x: number): string {
  if (Number.isNaN(x)) return 'NaN';
  if (!Number.isFinite(x)) return x > 0 ? 'Infinity' : '-Infinity';
  if (x === 0) return Object.is(x, -0) ? '-0.0' : '0.0';
  const sign = x < 0 ? '-' : '';
  const [mantissa, expText] = Math.abs(x).toExponential().split('e') as [string, string];
  const digits = mantissa.replace('.', '');
  const exp = Number(expText);
  if (exp < -4 || exp >= 16) {
    const m = digits.length > 1 ? `${digits[0]}.${digits.slice(1)}` : digits;
    return `${sign}${m}e${exp < 0 ? '-' : '+'}${String(Math.abs(exp)).padStart(2, '0')}`;
  }
  if (exp < 0) return `${sign}0.${'0'.repeat(-exp - 1)}${digits}`;
  if (digits.length <= exp + 1) return `${sign}${digits}${'0'.repeat(exp + 1 - digits.length)}.0`;
  return `${sign}${digits.slice(0, exp + 1)}.${digits.slice(exp + 1)}`;
}

/**
 * A JSON number literal as Python's `json.dumps(json.loads(literal))` writes it: an integer literal exactly as its
 * digits (Python's ints are unbounded; `-0` is `0`), a float literal (with `.`, `e` or `E`) as `pythonFloatText`.
 * Contract: `literal` is a JSON number literal.
 */
export function pythonNumberText(literal: string): string {
  if (/[.eE]/.test(literal)) return pythonFloatText(Number(literal));
  return literal === '-0' ? '0' : literal;
}

/**
 * A value as Python's `json.dumps(value, ensure_ascii=False)` writes it (`", "` and `": "` separators); a
 * `JsonNumberLiteral` as Python writes its literal. A plain number: a non-integral one can only come from a float
 * literal, so it is written as Python writes that float; an integral one as an integer (its literal, where it may
 * have been `1.0`, is what `readJson` keeps).
 */
export function pythonJson(value: unknown): string {
  return writePython(value, '');
}

/** `s` followed by `pythonJson(value)`: one string built by appending (a large schema costs no arrays of parts). */
function writePython(value: unknown, s: string): string {
  if (Array.isArray(value)) {
    s += '[';
    for (let i = 0; i < value.length; i++) s = writePython(value[i], i === 0 ? s : s + ', ');
    return s + ']';
  }
  if (value instanceof JsonNumberLiteral) return s + pythonNumberText(value.literal);
  if (typeof value === 'object' && value !== null) {
    const o = value as Record<string, unknown>;
    s += '{';
    let first = true;
    for (const k of Object.keys(o)) {
      if (o[k] === undefined) continue;
      s = writePython(o[k], `${first ? s : s + ', '}${JSON.stringify(k)}: `);
      first = false;
    }
    return s + '}';
  }
  if (typeof value === 'number') {
    if (!Number.isInteger(value)) return s + pythonFloatText(value);
    if (!Number.isSafeInteger(value)) return s + value.toFixed(0);
  }
  return s + (JSON.stringify(value) ?? 'null');
}

const NUMBER = /-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?/y;
const WORD = /true|false|null/y;

/**
 * The JSON value at `start` in `text`, as JSON.parse reads it but for its numbers, each `number(literal)`; and the
 * index after it. Strings are read by JSON.parse of their literal; an object's members as JSON.parse sets them (an
 * own `__proto__`, a repeated key keeping its first place).
 * Contract: `text` from `start` is a JSON value JSON.parse has accepted (nothing is checked here).
 */
export function readJson(
  text: string,
  start: number,
  number: (literal: string) => unknown,
): { value: unknown; end: number } {
  const r = new Reader(text, start, number);
  const value = r.value();
  return { value, end: r.i };
}

class Reader {
  constructor(
    readonly text: string,
    public i: number,
    readonly number: (literal: string) => unknown,
  ) {}

  value(): unknown {
    this.space();
    const t = this.text;
    const c = t.charCodeAt(this.i);
    if (c === 0x22) return this.string();
    if (c === 0x7b) return this.object();
    if (c === 0x5b) return this.array();
    WORD.lastIndex = this.i;
    if (WORD.test(t)) {
      const word = t.slice(this.i, WORD.lastIndex);
      this.i = WORD.lastIndex;
      return word === 'null' ? null : word === 'true';
    }
    NUMBER.lastIndex = this.i;
    NUMBER.test(t);
    const literal = t.slice(this.i, NUMBER.lastIndex);
    this.i = NUMBER.lastIndex;
    return this.number(literal);
  }

  space(): void {
    const t = this.text;
    let c = t.charCodeAt(this.i);
    while (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09) c = t.charCodeAt(++this.i);
  }

  string(): string {
    const end = stringEnd(this.text, this.i);
    const inner = this.text.slice(this.i + 1, end - 1);
    // Without an escape a string literal is its text (JSON.parse accepted it: no control character is in it).
    const s = inner.includes('\\') ? (JSON.parse(this.text.slice(this.i, end)) as string) : inner;
    this.i = end;
    return s;
  }

  object(): Record<string, unknown> {
    const out: Record<string, unknown> = {};
    this.i++;
    this.space();
    if (this.text.charCodeAt(this.i) === 0x7d) return (this.i++, out);
    for (;;) {
      this.space();
      const key = this.string();
      this.space();
      this.i++; // the colon
      const value = this.value();
      // An own `__proto__` as JSON.parse makes it (an assignment would set the prototype); any other key assigned.
      if (key === '__proto__')
        Object.defineProperty(out, key, { value, writable: true, enumerable: true, configurable: true });
      else out[key] = value;
      this.space();
      if (this.text.charCodeAt(this.i++) === 0x7d) return out;
    }
  }

  array(): unknown[] {
    const out: unknown[] = [];
    this.i++;
    this.space();
    if (this.text.charCodeAt(this.i) === 0x5d) return (this.i++, out);
    for (;;) {
      out.push(this.value());
      this.space();
      if (this.text.charCodeAt(this.i++) === 0x5d) return out;
    }
  }
}

/** The index after the string literal whose opening quote is at `i` (its closing quote: one not escaped). */
function stringEnd(t: string, i: number): number {
  let q = t.indexOf('"', i + 1);
  for (;;) {
    let backslashes = 0;
    while (t.charCodeAt(q - 1 - backslashes) === 0x5c) backslashes++;
    if (backslashes % 2 === 0) return q + 1;
    q = t.indexOf('"', q + 1);
  }
}

/** Whether a parsed value holds an integral number: its literal (`1` or `1.0`, or an int past 2^53) decides its text. */
export function holdsIntegralNumber(v: unknown): boolean {
  if (typeof v === 'number') return Number.isInteger(v);
  if (typeof v !== 'object' || v === null) return false;
  for (const x of Array.isArray(v) ? v : Object.values(v)) if (holdsIntegralNumber(x)) return true;
  return false;
}

/**
 * A float literal or an integer literal of 16 digits or more at the start or after a `:`, `,` or `[`: JSON text without a match has
 * no number Python writes otherwise than JavaScript (a 15-digit integer is exact as a double). A match inside a
 * string only costs a closer reading.
 */
const PYTHON_SENSITIVE = /(?:^|[:,[])\s*-?(?:\d+[.eE]|\d{16})/;

/** Whether JSON text may hold a number whose Python text its JSON.parse cannot give (`PYTHON_SENSITIVE`). */
export function mayDifferInPython(text: string): boolean {
  return PYTHON_SENSITIVE.test(text);
}

const literalOf = (literal: string): JsonNumberLiteral => new JsonNumberLiteral(literal);
const INPUT_KEY = Buffer.from('"input"');

/**
 * The `"input": {...}` members of a Messages body's JSON (its UTF-8 bytes), read in order with their number literals:
 * the source of the `tool_use` inputs whose Python text their parse cannot give. A member inside a string is passed
 * over (its quote is escaped), and so is one inside a member already read. The bytes are searched natively and only
 * the inputs read are decoded.
 */
export class InputSources {
  readonly #b: Buffer;
  #pos = 0;
  constructor(bytes: Uint8Array) {
    this.#b = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  }

  /**
   * The next `input` object after the last one taken whose parse is `parsed` (compared as JSON text), read with its
   * literals; undefined where none is (the caller writes the parse).
   */
  take(parsed: unknown): unknown {
    const b = this.#b;
    const want = JSON.stringify(parsed);
    for (;;) {
      const q = b.indexOf(INPUT_KEY, this.#pos);
      if (q < 0) return undefined;
      this.#pos = q + INPUT_KEY.length;
      let backslashes = 0;
      while (b[q - 1 - backslashes] === 0x5c) backslashes++;
      if (backslashes % 2 !== 0) continue;
      const colon = skipJsonSpace(b, q + INPUT_KEY.length);
      if (b[colon] !== 0x3a) continue;
      const brace = skipJsonSpace(b, colon + 1);
      if (b[brace] !== 0x7b) continue;
      const end = jsonValueEnd(b, brace);
      this.#pos = end;
      const text = b.toString('utf8', brace, end);
      if (JSON.stringify(JSON.parse(text)) !== want) continue;
      return mayDifferInPython(text) ? readJson(text, 0, literalOf).value : undefined;
    }
  }
}

/** What a request's tools need to be written as Python writes them (`pythonToolsJson`). */
const enum Need {
  /** Their parse prints as Python prints it: nothing to write. */
  None,
  /** A float Python writes in another form (`1e-07`): the parse gives its text. */
  Parse,
  /** An integral number (`1` or `1.0`, or an int past 2^53): only its literal gives its text. */
  Literals,
}

function needOf(v: unknown): Need {
  if (typeof v === 'number') {
    if (Number.isInteger(v)) return Need.Literals;
    return Number.isFinite(v) && pythonFloatText(v) !== String(v) ? Need.Parse : Need.None;
  }
  if (typeof v !== 'object' || v === null) return Need.None;
  let need = Need.None;
  // Loops that allocate nothing: a large tools list without numbers costs this walk alone.
  if (Array.isArray(v)) {
    for (let i = 0; i < v.length; i++) {
      const x: unknown = v[i];
      if (typeof x === 'string' || typeof x === 'boolean') continue;
      const n = needOf(x);
      if (n === Need.Literals) return n;
      if (n === Need.Parse) need = n;
    }
    return need;
  }
  const o = v as Record<string, unknown>;
  for (const k in o) {
    if (!Object.prototype.hasOwnProperty.call(o, k)) continue;
    const x = o[k];
    if (typeof x === 'string' || typeof x === 'boolean') continue;
    const n = needOf(x);
    if (n === Need.Literals) return n;
    if (n === Need.Parse) need = n;
  }
  return need;
}

/**
 * A request's tools as JSON text whose parse by Python's rules (a float literal a float, an integer literal an exact
 * int; the template's: tokenizer's `parseToolArguments`) is vLLM's parse of them, where their JavaScript parse would
 * print otherwise in the template; undefined where it prints the same. `tools`: the body's top-level `tools` as parsed.
 * `convert`, what the chat request makes of them (an agent API's conversion, which already accepted `tools` and is run
 * again on the same values with their number literals in place of numbers, so it must not read numbers); without it
 * the chat request holds them as they are. `source`: the body's UTF-8 JSON, whose top-level `tools` member gives an
 * integral number's literal (`1.0` or `1`); without it such a number is written from the parse, as an integer.
 * Why cheap: tools without an integral number or a float Python writes in another form (`1e-07`) cost one walk; with
 * integral numbers, their text (the body's `tools` member: its members are scanned once per bytes, json-text.ts) is
 * read once per tools list and thread (`TOOLS_TEXTS`): a list seen before costs a lookup and a comparison of its
 * bytes, whether every number prints alike (`"minimum": 0`: a regular expression over the text) or a float literal
 * among them had its literals read (none without `convert`: the client's text is the answer).
 * Contract: `convert` is a pure function of the tools it is given (its answer is remembered with their text).
 */
export function pythonToolsJson(
  tools: unknown,
  source: Uint8Array | undefined,
  convert?: (tools: unknown) => unknown,
): string | undefined {
  if (!Array.isArray(tools) || tools.length === 0) return undefined;
  const need = needOf(tools);
  if (need === Need.None) return undefined;
  // JSON.parse keeps a repeated key's last value; so does the member scan.
  const member =
    need === Need.Literals && source !== undefined ? jsonByteMembers(source).find((m) => m.key === 'tools') : undefined;
  if (source === undefined || member === undefined) return written(convert === undefined ? tools : convert(tools));
  const bytes = source.subarray(member.start, member.end);
  const memo = bytes.length >= MEMO_MIN_BYTES ? TOOLS_TEXTS.get(bytes) : undefined;
  if (memo !== undefined && (!memo.differs || memo.convert === convert)) return memo.json;
  const text = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('utf8');
  // Without a float literal or a long integer, every number is an integer JavaScript prints as Python does.
  const differs = mayDifferInPython(text);
  const json = !differs
    ? undefined
    : convert === undefined
      ? text
      : written(convert(readJson(text, 0, literalOf).value));
  if (bytes.length >= MEMO_MIN_BYTES) TOOLS_TEXTS.set(bytes, { differs, convert, json }, json?.length ?? 0);
  return json;
}

/** Tools as Python writes them; none where a conversion keeps none (a Responses `tool_choice: none`). */
const written = (tools: unknown): string | undefined => (tools === undefined ? undefined : pythonJson(tools));

/** A request's tools text read (`pythonToolsJson`): what it gives, and for which `convert` (any where it `differs` not). */
interface ToolsText {
  /** Whether a number in it prints otherwise in JavaScript (`mayDifferInPython`): if not, nothing, whatever converts it. */
  readonly differs: boolean;
  readonly convert: ((tools: unknown) => unknown) | undefined;
  readonly json: string | undefined;
}

/** Below this many bytes a tools text is read each time: reading it costs about what remembering it does. */
const MEMO_MIN_BYTES = 4096;

/**
 * The tools texts read on this thread, by their bytes: an agent's tools list (often hundreds of KB) on each of its
 * turns after the first. Bounded: at most 64 lists, and 16 MiB of their bytes and answers, per thread.
 */
const TOOLS_TEXTS = new BytesMemo<ToolsText>(64, 16 * 1024 * 1024);
