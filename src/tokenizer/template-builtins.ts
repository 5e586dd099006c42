/**
 * Member access, methods, tests and filters of a compiled chat template, over
 * the plain values of `template-values.ts`, each with the semantics of
 * @huggingface/jinja's runtime (its `builtins` of strings and mappings, its
 * `Environment.TESTS`, its `applyFilter`). The names a template may use are the
 * keys of `STRING_METHODS`, `MAPPING_METHODS`, `TESTS`, `FILTERS` and
 * `CALL_FILTERS`: the compiler refuses any other name, so that template keeps
 * the interpreter.
 */
import {
  isArray,
  JSON_DEFAULTS,
  K,
  kindOf,
  LoopState,
  mappingEntries,
  ownHas,
  printed,
  PythonNumber,
  TemplateDeopt,
  TemplateNamespace,
  toJson,
  truthy,
  type JsonOptions,
  type Kwargs,
  type TemplateFunction,
} from './template-values.js';

type Method<T> = (self: T, args: unknown[], kwargs: Kwargs | undefined) => unknown;

function affix(which: 'startsWith' | 'endsWith'): Method<string> {
  return (s, args) => {
    if (args.length === 0) throw new Error(`${which}() requires at least one argument`);
    const p = args[0];
    if (typeof p === 'string') return s[which](p);
    if (kindOf(p) === K.Array || kindOf(p) === K.Tuple) {
      for (const item of p as unknown[]) {
        if (typeof item !== 'string') throw new Error(`${which}() tuple elements must be strings`);
        if (s[which](item)) return true;
      }
      return false;
    }
    throw new Error(`${which}() argument must be a string or tuple of strings`);
  };
}

/** Python's `str.split(sep=None, maxsplit=-1)`, as the runtime implements it. */
function split(s: string, args: unknown[], kwargs: Kwargs | undefined): string[] {
  if (kwargs !== undefined) throw new TemplateDeopt('split with keyword arguments');
  const sep = args[0] ?? null;
  if (sep !== null && typeof sep !== 'string') throw new Error('sep argument must be a string or null');
  const max = args[1] ?? -1;
  if (kindOf(max) !== K.Integer) throw new Error('maxsplit argument must be a number');
  const maxsplit = max as number;
  let result: string[] = [];
  if (sep === null) {
    const text = s.trimStart();
    for (const { 0: match, index } of text.matchAll(/\S+/g)) {
      if (maxsplit !== -1 && result.length >= maxsplit) {
        result.push(match + text.slice(index + match.length));
        break;
      }
      result.push(match);
    }
  } else {
    if (sep === '') throw new Error('empty separator');
    result = s.split(sep);
    if (maxsplit !== -1 && result.length > maxsplit) result.push(result.splice(maxsplit).join(sep));
  }
  return result;
}

function escapeRegExp(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

function replace(s: string, args: unknown[], kwargs: Kwargs | undefined): string {
  if (args.length < 2) throw new Error('replace() requires at least two arguments');
  const [from, to] = args;
  if (typeof from !== 'string' || typeof to !== 'string') throw new Error('replace() arguments must be strings');
  const count = args.length > 2 ? args[2] : (kwargs?.get('count') ?? null);
  if (count !== null && kindOf(count) !== K.Integer) throw new Error('replace() count argument must be a number');
  if (count === 0) return s;
  let remaining = count === null || (count as number) < 0 ? Infinity : (count as number);
  const pattern = from.length === 0 ? /(?=)/gu : new RegExp(escapeRegExp(from), 'gu');
  return s.replaceAll(pattern, (match) => {
    if (remaining <= 0) return match;
    remaining--;
    return to;
  });
}

/** The methods of a string (`s.strip()`), with the runtime's argument checks. */
const STRING_METHODS: ReadonlyMap<string, Method<string>> = new Map<string, Method<string>>([
  ['upper', (s) => s.toUpperCase()],
  ['lower', (s) => s.toLowerCase()],
  // The runtime's strip family ignores its argument (`strip('\n')` trims all whitespace): so does this.
  ['strip', (s) => s.trim()],
  ['lstrip', (s) => s.trimStart()],
  ['rstrip', (s) => s.trimEnd()],
  ['title', (s) => s.replace(/\b\w/g, (c) => c.toUpperCase())],
  ['capitalize', (s) => s.charAt(0).toUpperCase() + s.slice(1)],
  ['startswith', affix('startsWith')],
  ['endswith', affix('endsWith')],
  ['split', split],
  ['replace', replace],
]);

/** The methods of a mapping (`d.items()`), found when the mapping has no own key of that name. */
const MAPPING_METHODS: ReadonlyMap<string, Method<Record<string, unknown>>> = new Map<
  string,
  Method<Record<string, unknown>>
>([
  [
    'get',
    (o, [key, fallback], kwargs) => {
      // The interpreter passes keyword arguments as one more positional (the default, here).
      if (kwargs !== undefined) throw new TemplateDeopt('get with keyword arguments');
      if (typeof key !== 'string') throw new Error('Object key must be a string');
      return ownHas(o, key) ? o[key] : (fallback ?? null);
    },
  ],
  ['items', (o) => mappingEntries(o)],
  ['keys', (o) => Object.keys(o)],
  ['values', (o) => Object.values(o)],
]);

const LOOP_ATTRIBUTES: Record<string, (l: LoopState) => unknown> = {
  index: (l) => l.i + 1,
  index0: (l) => l.i,
  revindex: (l) => l.items.length - l.i,
  revindex0: (l) => l.items.length - l.i - 1,
  first: (l) => l.i === 0,
  last: (l) => l.i === l.items.length - 1,
  length: (l) => l.items.length,
  previtem: (l) => (l.i > 0 ? l.items[l.i - 1] : undefined),
  nextitem: (l) => (l.i < l.items.length - 1 ? l.items[l.i + 1] : undefined),
};

/** `o.p` and `o[p]` (not a slice): the runtime's `evaluateMemberExpression`. */
export function member(o: unknown, p: unknown): unknown {
  const k = kindOf(o);
  switch (k) {
    case K.Object: {
      if (typeof p !== 'string') throw new Error('Cannot access property with non-string');
      const obj = o as Record<string, unknown>;
      if (ownHas(obj, p)) return obj[p];
      if (p === 'dictsort') throw new TemplateDeopt('dictsort');
      const m = MAPPING_METHODS.get(p);
      return m === undefined ? undefined : bind(m, obj);
    }
    case K.Namespace:
      if (typeof p !== 'string') throw new Error('Cannot access property with non-string');
      return (o as TemplateNamespace).map.get(p);
    case K.Loop: {
      const attr = typeof p === 'string' && ownHas(LOOP_ATTRIBUTES, p) ? LOOP_ATTRIBUTES[p] : undefined;
      if (attr === undefined) throw new TemplateDeopt('loop attribute');
      return attr(o as LoopState);
    }
    case K.String:
    case K.Array:
    case K.Tuple:
      return sequenceMember(o as string | unknown[], k, p);
    default:
      if (typeof p !== 'string') throw new Error('Cannot access property with non-string');
      return undefined;
  }
}

function sequenceMember(o: string | unknown[], k: K, p: unknown): unknown {
  const kp = kindOf(p);
  if (kp === K.Integer) return o.at(p as number);
  if (kp !== K.String) throw new Error('Cannot access property with non-string/non-number');
  if (p === 'length') return o.length;
  if (k !== K.String) return undefined;
  const m = STRING_METHODS.get(p as string);
  return m === undefined ? undefined : bind(m, o as string);
}

function bind<T>(m: Method<T>, self: T): TemplateFunction {
  return (args, kwargs) => m(self, args, kwargs);
}

/** `o.name(args)`: a string's or a mapping's method called directly, anything else through `member`. */
export function callMethod(o: unknown, name: string, args: unknown[], kwargs: Kwargs | undefined): unknown {
  if (typeof o === 'string') {
    const m = STRING_METHODS.get(name);
    if (m !== undefined) return m(o, args, kwargs);
  }
  return call(member(o, name), args, kwargs);
}

export function call(fn: unknown, args: unknown[], kwargs: Kwargs | undefined): unknown {
  if (typeof fn !== 'function') throw new Error('Cannot call something that is not a function');
  return (fn as TemplateFunction)(args, kwargs);
}

/** Python slicing (`[::-1]`, `[1:]`) of an array or a string (by code points, as the runtime does). */
export function sliceOf(o: unknown, start: unknown, stop: unknown, step: unknown): unknown {
  const k = kindOf(o);
  if (!isArray(k) && k !== K.String) throw new Error('Slice object must be an array or string');
  for (const x of [start, stop, step]) {
    if (x !== undefined && kindOf(x) !== K.Integer) throw new Error('Slice bounds must be numeric or undefined');
  }
  const array = k === K.String ? Array.from(o as string) : (o as unknown[]);
  const result = pySlice(array, start as number | undefined, stop as number | undefined, (step as number) ?? 1);
  return k === K.String ? result.join('') : result;
}

function pySlice(a: readonly unknown[], start: number | undefined, stop: number | undefined, step: number): unknown[] {
  const dir = Math.sign(step);
  const n = a.length;
  let from: number;
  let to: number;
  if (dir >= 0) {
    from = (start ??= 0) < 0 ? Math.max(n + start, 0) : Math.min(start, n);
    to = (stop ??= n) < 0 ? Math.max(n + stop, 0) : Math.min(stop, n);
  } else {
    from = (start ??= n - 1) < 0 ? Math.max(n + start, -1) : Math.min(start, n - 1);
    to = (stop ??= -1) < -1 ? Math.max(n + stop, -1) : Math.min(stop, n - 1);
  }
  const result: unknown[] = [];
  for (let i = from; dir * i < dir * to; i += step) result.push(a[i]);
  return result;
}

/** `x is name`: the runtime's tests that take only the operand. */
export const TESTS: ReadonlyMap<string, (v: unknown) => boolean> = new Map<string, (v: unknown) => boolean>([
  ['boolean', (v) => typeof v === 'boolean'],
  ['callable', (v) => typeof v === 'function'],
  ['odd', (v) => integerOperand(v, 'odd') % 2 !== 0],
  ['even', (v) => integerOperand(v, 'even') % 2 === 0],
  ['false', (v) => v === false],
  ['true', (v) => v === true],
  ['none', (v) => v === null],
  ['string', (v) => typeof v === 'string'],
  ['number', (v) => typeof v === 'number' || v instanceof PythonNumber],
  ['integer', (v) => kindOf(v) === K.Integer],
  ['iterable', (v) => kindOf(v) === K.Array || typeof v === 'string'],
  ['mapping', (v) => mappingLike(v)],
  ['sequence', (v) => isArray(kindOf(v)) || typeof v === 'string' || mappingLike(v)],
  ['lower', (v) => typeof v === 'string' && v === v.toLowerCase()],
  ['upper', (v) => typeof v === 'string' && v === v.toUpperCase()],
  ['defined', (v) => v !== undefined],
  ['undefined', (v) => v === undefined],
]);

function mappingLike(v: unknown): boolean {
  const k = kindOf(v);
  if (k === K.Loop) throw new TemplateDeopt('loop tested');
  return k === K.Object;
}

function integerOperand(v: unknown, name: string): number {
  if (kindOf(v) !== K.Integer) throw new Error(`cannot ${name} on this type`);
  return v as number;
}

function badFilter(name: string): never {
  throw new Error(`Cannot apply filter "${name}" to this type`);
}

function lengthOf(v: unknown): number {
  const k = kindOf(v);
  if (k === K.String || isArray(k)) return (v as string | unknown[]).length;
  if (k === K.Object) return Object.keys(v as object).length;
  return badFilter('length');
}

function joined(v: unknown, sep: string, name: string): string {
  if (typeof v === 'string') return sep === '' ? v : Array.from(v).join(sep);
  if (!isArray(kindOf(v))) return badFilter(name);
  for (const x of v as unknown[])
    if (typeof x === 'object' && x !== null) throw new TemplateDeopt('join of containers');
  return (v as unknown[]).join(sep);
}

function stringFilter(name: string, f: (s: string) => string): (v: unknown) => unknown {
  return (v) => (typeof v === 'string' ? f(v) : badFilter(name));
}

/** `x | name` without arguments. */
export const FILTERS: ReadonlyMap<string, (v: unknown) => unknown> = new Map<string, (v: unknown) => unknown>([
  ['safe', (v) => v],
  ['tojson', (v) => toJson(v, JSON_DEFAULTS, 0, true)],
  ['length', lengthOf],
  ['trim', stringFilter('trim', (s) => s.trim())],
  ['upper', stringFilter('upper', (s) => s.toUpperCase())],
  ['lower', stringFilter('lower', (s) => s.toLowerCase())],
  ['capitalize', stringFilter('capitalize', (s) => s.charAt(0).toUpperCase() + s.slice(1))],
  ['items', (v) => (kindOf(v) === K.Object ? mappingEntries(v as Record<string, unknown>) : badFilter('items'))],
  ['join', (v) => joined(v, '', 'join')],
  ['list', (v) => (isArray(kindOf(v)) ? v : badFilter('list'))],
  ['first', (v) => edgeItem(v, 0)],
  ['last', (v) => edgeItem(v, -1)],
  ['reverse', (v) => (isArray(kindOf(v)) ? Array.from(v as unknown[]).reverse() : badFilter('reverse'))],
  ['string', (v) => (typeof v === 'string' || isArray(kindOf(v)) ? printed(v) : primitiveString(v))],
]);

function edgeItem(v: unknown, at: number): unknown {
  if (!isArray(kindOf(v))) return badFilter(at === 0 ? 'first' : 'last');
  const a = v as unknown[];
  if (a.length === 0) throw new TemplateDeopt('first or last of an empty list');
  return a.at(at);
}

function primitiveString(v: unknown): string {
  const k = kindOf(v);
  if (k === K.Integer || k === K.Float || k === K.Boolean) return String(v);
  return badFilter('string');
}

type CallFilter = (v: unknown, args: unknown[], kwargs: Kwargs | undefined) => unknown;

/** `x | name(args)`. */
export const CALL_FILTERS: ReadonlyMap<string, CallFilter> = new Map<string, CallFilter>([
  ['tojson', (v, _a, kw) => toJson(v, jsonOptions(kw), 0, true)],
  [
    'join',
    (v, a, kw) => {
      const sep = a[0] ?? kw?.get('separator') ?? '';
      if (typeof sep !== 'string') throw new Error('separator must be a string');
      return joined(v, sep, 'join');
    },
  ],
  [
    'default',
    (v, a, kw) => {
      const fallback = a.length > 0 ? a[0] : '';
      const boolean = a.length > 1 ? a[1] : (kw?.get('boolean') ?? false);
      if (typeof boolean !== 'boolean') throw new Error('`default` filter flag must be a boolean');
      return v === undefined || (boolean && !truthy(v)) ? fallback : v;
    },
  ],
  ['replace', (v, a, kw) => (typeof v === 'string' ? replace(v, a, kw) : badFilter('replace'))],
  ['map', mapAttribute],
]);

function jsonOptions(kw: Kwargs | undefined): JsonOptions {
  if (kw === undefined) return JSON_DEFAULTS;
  const indent = kw.get('indent') ?? null;
  if (indent !== null && kindOf(indent) !== K.Integer) throw new Error('If set, indent must be a number');
  const ensureAscii = kw.get('ensure_ascii') ?? false;
  if (typeof ensureAscii !== 'boolean') throw new Error('If set, ensure_ascii must be a boolean');
  const sortKeys = kw.get('sort_keys') ?? false;
  if (typeof sortKeys !== 'boolean') throw new Error('If set, sort_keys must be a boolean');
  const sep = kw.get('separators') ?? null;
  let separators: [string, string] | null = null;
  if (isArray(kindOf(sep))) {
    const [a, b] = sep as unknown[];
    if ((sep as unknown[]).length !== 2 || typeof a !== 'string' || typeof b !== 'string') {
      throw new Error('separators must be a tuple of two strings');
    }
    separators = [a, b];
  } else if (sep !== null) throw new Error('If set, separators must be a tuple of two strings');
  return { indent: indent as number | null, ensureAscii, sortKeys, separators };
}

/**
 * `selectattr` / `rejectattr` with string-literal arguments: items whose
 * attribute is present and passes `test` (the compiler's choice: truthiness,
 * a named test, or `equalto` its value).
 */
export function selectAttr(v: unknown, select: boolean, attr: string, test: (a: unknown) => boolean): unknown[] {
  if (!isArray(kindOf(v))) throw new Error('selectattr needs a list');
  const items = v as unknown[];
  const kinds = items.map(kindOf);
  if (kinds.some((k) => k !== K.Object && k !== K.Namespace)) throw new Error('selectattr needs objects');
  // `Array.from` first: a tuple's own `filter` would give a tuple, the interpreter gives a list.
  return Array.from(items).filter((item, i) => {
    const has = kinds[i] === K.Namespace ? (item as TemplateNamespace).map.has(attr) : ownHas(item as object, attr);
    if (!has) return !select;
    const a =
      kinds[i] === K.Namespace ? (item as TemplateNamespace).map.get(attr) : (item as Record<string, unknown>)[attr];
    return test(a) === select;
  });
}

/** An attribute path (`a.b.0`) into mappings, namespaces and lists; undefined where it leads nowhere. */
function attributePath(item: unknown, path: string): unknown {
  let v = item;
  for (const part of path.split('.')) {
    const k = kindOf(v);
    if (k === K.Object) v = ownHas(v as object, part) ? (v as Record<string, unknown>)[part] : undefined;
    else if (k === K.Namespace) v = (v as TemplateNamespace).map.get(part);
    else if (isArray(k)) {
      const index = parseInt(part, 10);
      const a = v as unknown[];
      if (isNaN(index) || index < 0 || index >= a.length) return undefined;
      v = a[index];
    } else return undefined;
    if (v === undefined) return undefined;
  }
  return v;
}

/** `xs | map(attribute='a.b', default=d)`: each item's attribute (the default where it has none). */
function mapAttribute(v: unknown, _args: unknown[], kwargs: Kwargs | undefined): unknown {
  if (!isArray(kindOf(v))) return badFilter('map');
  if (kwargs === undefined || !kwargs.has('attribute')) throw new Error('map without attribute is not supported');
  const attr = kwargs.get('attribute');
  if (typeof attr !== 'string') throw new Error('attribute must be a string');
  return Array.from(v as unknown[], (item) => {
    const k = kindOf(item);
    if (k !== K.Object && k !== K.Namespace) throw new Error('items in map must be an object');
    const value = attributePath(item, attr);
    return value === undefined ? kwargs.get('default') : value;
  });
}
