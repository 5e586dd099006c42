/**
 * The value model of a compiled chat template: plain JavaScript values standing
 * for @huggingface/jinja's runtime values, and the operations on them with the
 * interpreter's exact semantics (truthiness, `+`/`~`, comparison, `in`,
 * printing, `tojson`).
 *
 * A value's kind is read off the value itself, as the interpreter's
 * `convertToRuntimeValues` reads its input: a string, an integer number
 * (`Number.isInteger`), a non-integer number (a float), a boolean, null, undefined, an
 * array (a `TemplateTuple` for a tuple literal), a `TemplateNamespace`, a
 * `LoopState` (the `loop` of a for statement), a function, any other object
 * (a mapping, in the order of `Object.keys`).
 *
 * Contract: where the interpreter's result depends on something this model
 * does not carry (a float whose value is integral, a loop object used as a
 * value, an equality between containers, integer-like keys in an object
 * literal) an operation throws `TemplateDeopt`, and the caller renders with the
 * interpreter instead. Any other error thrown here is one the interpreter
 * throws too on the same input; the caller reruns the interpreter then as well,
 * so its error (and message) is the one reported.
 */

/** Thrown where the compiled form cannot reproduce the interpreter exactly; the render falls back. */
export class TemplateDeopt extends Error {}

/** A tuple literal: an array the interpreter types as `TupleValue`. */
export class TemplateTuple<T = unknown> extends Array<T> {}

/** `namespace(...)`: an attribute container with insertion-ordered keys. */
export class TemplateNamespace {
  constructor(readonly map: Map<string, unknown>) {}
}

/**
 * A number of a tool call's arguments whose Python text the plain values cannot give (an integral float such as `1.0`,
 * an integer beyond 2^53, a float Python writes in another form such as `1e-07`): `text` is what Python prints and
 * `tojson` writes for it (vLLM's template sees the float or int its JSON literal gave). Printing, `tojson`, truthiness
 * and the `number` test read it; any other use throws `TemplateDeopt`, and the interpreter renders with `value`.
 */
export class PythonNumber {
  constructor(
    readonly value: number,
    readonly text: string,
  ) {}
}

/** One iteration's `loop`; its attributes are computed when read. */
export class LoopState {
  constructor(
    readonly i: number,
    readonly items: readonly unknown[],
  ) {}
}

/** Keyword arguments of a call, in source order. */
export type Kwargs = Map<string, unknown>;
/** A callable value: positional arguments and keyword arguments (undefined when none). */
export type TemplateFunction = (args: unknown[], kwargs: Kwargs | undefined) => unknown;

export const enum K {
  Undefined,
  Null,
  String,
  Integer,
  Float,
  Boolean,
  Array,
  Tuple,
  Object,
  Namespace,
  Loop,
  Function,
}

export function kindOf(v: unknown): K {
  switch (typeof v) {
    case 'string':
      return K.String;
    case 'number':
      return Number.isInteger(v) ? K.Integer : K.Float;
    case 'boolean':
      return K.Boolean;
    case 'undefined':
      return K.Undefined;
    case 'function':
      return K.Function;
    case 'object':
      if (v === null) return K.Null;
      if (Array.isArray(v)) return v instanceof TemplateTuple ? K.Tuple : K.Array;
      if (v instanceof TemplateNamespace) return K.Namespace;
      if (v instanceof LoopState) return K.Loop;
      if (v instanceof PythonNumber) throw new TemplateDeopt('python number');
      return K.Object;
    default:
      throw new TemplateDeopt('unsupported value type');
  }
}

export function isArray(k: K): boolean {
  return k === K.Array || k === K.Tuple;
}

const hasOwn = Object.prototype.hasOwnProperty;

export function ownHas(o: object, key: string): boolean {
  return hasOwn.call(o, key);
}

/** Python truthiness as the interpreter has it: empty arrays and mappings are false, a namespace is true. */
export function truthy(v: unknown): boolean {
  if (typeof v !== 'object' || v === null) return v !== undefined && v !== null && !!v;
  if (v instanceof PythonNumber) return v.value !== 0;
  if (Array.isArray(v)) return v.length > 0;
  if (v instanceof TemplateNamespace) return true;
  if (v instanceof LoopState) throw new TemplateDeopt('loop used as a value');
  for (const key in v) if (hasOwn.call(v, key)) return true;
  return false;
}

/** A float is carried as a non-integer number; an integral float (1.0, 4 / 2) is not representable. */
export function floatResult(n: number): number {
  if (Number.isInteger(n) || Object.is(n, -0) || !Number.isFinite(n)) throw new TemplateDeopt('integral float');
  return n;
}

/** What a runtime value's `toString()` gives: the text `{{ v }}` prints. */
export function printed(v: unknown): string {
  if (v instanceof PythonNumber) return v.text;
  switch (kindOf(v)) {
    case K.String:
      return v as string;
    case K.Integer:
    case K.Float:
    case K.Boolean:
    case K.Null:
    case K.Undefined:
      return String(v);
    case K.Array:
    case K.Object:
    case K.Namespace:
      return toJson(v, JSON_DEFAULTS, 0, false);
    case K.Tuple:
      throw new Error('Cannot convert to JSON: TupleValue');
    default:
      throw new TemplateDeopt('printing a function or loop');
  }
}

/**
 * What `value.toString()` of a runtime value's raw JS value gives: the operands of `+` on strings and of `~`.
 * A scalar prints as `{{ }}` prints it; a list is its items printed and joined with commas (JS array text);
 * a mapping or namespace is the text of a JS Map.
 */
function rawText(v: unknown): string {
  const k = kindOf(v);
  if (isArray(k)) return (v as unknown[]).map(printed).join(',');
  if (k === K.Object || k === K.Namespace) return '[object Map]';
  if (k === K.Null || k === K.Undefined) throw new TemplateDeopt('text of null');
  return printed(v);
}

export interface JsonOptions {
  indent: number | null;
  ensureAscii: boolean;
  sortKeys: boolean;
  separators: [string, string] | null;
}

export const JSON_DEFAULTS: JsonOptions = { indent: null, ensureAscii: false, sortKeys: false, separators: null };

const NON_ASCII = /[\x7f-\uffff]/g;
function asciiSafe(s: string): string {
  return s.replace(NON_ASCII, (c) => '\\u' + c.charCodeAt(0).toString(16).padStart(4, '0'));
}

/** The interpreter's `toJSON`: Python-like separators, insertion order, `undefined` as null when asked. */
export function toJson(v: unknown, o: JsonOptions, depth: number, undefinedAsNull: boolean): string {
  if (v instanceof PythonNumber) return v.text;
  const k = kindOf(v);
  switch (k) {
    case K.Null:
      return 'null';
    case K.Undefined:
      return undefinedAsNull ? 'null' : 'undefined';
    case K.Integer:
    case K.Float:
    case K.Boolean:
      return JSON.stringify(v);
    case K.String:
      return o.ensureAscii ? asciiSafe(JSON.stringify(v)) : JSON.stringify(v);
    case K.Array:
    case K.Object:
    case K.Namespace:
      return containerJson(v as object, k, o, depth, undefinedAsNull);
    case K.Tuple:
      throw new Error('Cannot convert to JSON: TupleValue');
    default:
      throw new TemplateDeopt('tojson of a function or loop');
  }
}

function containerJson(v: object, k: K, o: JsonOptions, depth: number, undefinedAsNull: boolean): string {
  const [itemSep, keySep] = o.separators ?? (o.indent ? [',', ': '] : [', ', ': ']);
  const indent = o.indent ? ' '.repeat(o.indent) : '';
  const base = '\n' + indent.repeat(depth);
  const child = base + indent;
  if (k === K.Array) {
    const core = (v as unknown[]).map((x) => toJson(x, o, depth + 1, undefinedAsNull));
    return o.indent && core.length > 0
      ? `[${child}${core.join(`${itemSep}${child}`)}${base}]`
      : `[${core.join(itemSep)}]`;
  }
  let entries = k === K.Namespace ? [...(v as TemplateNamespace).map] : mappingEntries(v as Record<string, unknown>);
  if (o.sortKeys) entries = entries.sort(([a], [b]) => a.localeCompare(b));
  const core = entries.map(([key, value]) => {
    const keyText = o.ensureAscii ? asciiSafe(JSON.stringify(key)) : JSON.stringify(key);
    const s = `${keyText}${keySep}${toJson(value, o, depth + 1, undefinedAsNull)}`;
    return o.indent ? `${child}${s}` : s;
  });
  return o.indent && core.length > 0 ? `{${core.join(itemSep)}${base}}` : `{${core.join(itemSep)}}`;
}

export function mappingEntries(o: Record<string, unknown>): [string, unknown][] {
  return Object.keys(o).map((key) => [key, o[key]]);
}

function numericLike(k: K): boolean {
  return k === K.Integer || k === K.Float || k === K.Boolean;
}

/** `==` / `!=`: the interpreter compares raw values with JS loose equality; containers only by identity. */
export function looseEquals(a: unknown, b: unknown): boolean {
  const ao = typeof a === 'object' && a !== null;
  const bo = typeof b === 'object' && b !== null;
  if (ao || bo || typeof a === 'function' || typeof b === 'function') throw new TemplateDeopt('container equality');
  return a == b;
}

/** `a + b`: two strings concatenate directly (the common case skips the general dispatch), anything else as `binary`. */
export function plus(a: unknown, b: unknown): unknown {
  return typeof a === 'string' && typeof b === 'string' ? a + b : binary('+', a, b);
}

/** Every binary operator but `and`, `or`, `==`, `!=` (compiled inline), in the interpreter's order of checks. */
export function binary(op: string, a: unknown, b: unknown): unknown {
  const ka = kindOf(a);
  const kb = kindOf(b);
  if (ka === K.Loop || kb === K.Loop) throw new TemplateDeopt('loop used as a value');
  if (ka === K.Undefined || kb === K.Undefined) {
    if (kb === K.Undefined && (op === 'in' || op === 'not in')) return op === 'not in';
    throw new Error(`Cannot perform operation ${op} on undefined values`);
  }
  if (ka === K.Null || kb === K.Null) throw new Error('Cannot perform operation on null values');
  if (op === '~') return rawText(a) + rawText(b);
  if (op === '**' && numericLike(ka) && numericLike(kb)) throw new TemplateDeopt('power');
  if ((ka === K.Integer || ka === K.Float) && (kb === K.Integer || kb === K.Float)) {
    const r = arithmetic(op, a as number, b as number, ka === K.Float || kb === K.Float);
    if (r !== undefined) return r;
  } else if (isArray(ka) && isArray(kb)) {
    // A plain list whatever the operands (a tuple's `concat` would give a tuple).
    if (op === '+') return [...(a as unknown[]), ...(b as unknown[])];
  } else if (isArray(kb)) {
    if (op === 'in' || op === 'not in') {
      if (typeof a === 'object' || typeof a === 'function') throw new TemplateDeopt('container membership');
      return (b as unknown[]).includes(a) === (op === 'in');
    }
  }
  return stringOps(op, a, ka, b, kb);
}

function stringOps(op: string, a: unknown, ka: K, b: unknown, kb: K): unknown {
  if ((ka === K.String || kb === K.String) && op === '+') return rawText(a) + rawText(b);
  if (ka === K.String && kb === K.String && (op === 'in' || op === 'not in')) {
    return (b as string).includes(a as string) === (op === 'in');
  }
  if (ka === K.String && kb === K.Object && (op === 'in' || op === 'not in')) {
    return ownHas(b as object, a as string) === (op === 'in');
  }
  throw new Error(`Unknown operator "${op}"`);
}

function arithmetic(op: string, a: number, b: number, float: boolean): unknown {
  switch (op) {
    case '+':
    case '-':
    case '*':
    case '//':
    case '%': {
      const r = op === '+' ? a + b : op === '-' ? a - b : op === '*' ? a * b : op === '//' ? Math.floor(a / b) : a % b;
      if (float) return floatResult(r);
      if (!Number.isFinite(r)) throw new TemplateDeopt('non-finite integer');
      return r;
    }
    case '/':
      return floatResult(a / b);
    case '<':
      return a < b;
    case '>':
      return a > b;
    case '>=':
      return a >= b;
    case '<=':
      return a <= b;
    default:
      return undefined;
  }
}

/** Unary `-` / `+` on a number or a boolean. */
export function signed(op: string, v: unknown): unknown {
  const k = kindOf(v);
  const sign = op === '-' ? -1 : 1;
  if (k === K.Integer || k === K.Boolean) return sign * (v ? Number(v) : 0);
  if (k === K.Float) return sign * (v as number);
  throw new Error(`Unknown operator "${op}"`);
}
