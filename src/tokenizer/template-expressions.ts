/**
 * Expressions of a compiled chat template: each node of @huggingface/jinja's
 * syntax tree becomes a closure over the render's variable slots (`Slots`),
 * built once per template. No template text becomes code: literals are data
 * captured by the closures, names are slot numbers fixed at compile time.
 *
 * Names resolve as the interpreter's scopes do: a for statement opens a scope
 * (once, not per iteration) holding its loop variables, `loop` and what its
 * body sets; a read looks in the innermost scope that may hold the name, then
 * outwards, ending at the render's globals. A scope's slots hold `UNSET` until
 * assigned, so "set in this scope yet?" is one comparison.
 */
import { CALL_FILTERS, call, callMethod, FILTERS, member, selectAttr, sliceOf, TESTS } from './template-builtins.js';
import {
  binary,
  floatResult,
  kindOf,
  K,
  looseEquals,
  plus,
  signed,
  TemplateDeopt,
  TemplateNamespace,
  TemplateTuple,
  truthy,
  type Kwargs,
  type TemplateFunction,
} from './template-values.js';

/** A node of the parsed template, read by its `type` (the classes are not exported by the package). */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type Node = { type: string } & Record<string, any>;

export type Slots = unknown[];
export type Expr = (s: Slots) => unknown;

/** A slot not assigned in its scope yet: the read goes on outwards. */
export const UNSET: unique symbol = Symbol('unset');

/** A construct the compiler does not reproduce: the template keeps the interpreter. */
export class Unsupported extends Error {}

/** One scope of names: the globals (no parent) or a for statement's. */
export class Scope {
  readonly slots = new Map<string, number>();
  constructor(
    readonly parent: Scope | undefined,
    readonly alloc: () => number,
  ) {}

  /** The slot of a name this scope holds, allocated for the globals on first use. */
  own(name: string): number | undefined {
    let slot = this.slots.get(name);
    if (slot === undefined && this.parent === undefined) {
      slot = this.alloc();
      this.slots.set(name, slot);
    }
    return slot;
  }

  declare(name: string): void {
    if (!this.slots.has(name)) this.slots.set(name, this.alloc());
  }
}

function namespace(args: unknown[], kwargs: Kwargs | undefined): TemplateNamespace {
  if (args.length > 1) throw new Error(`namespace expected at most 1 argument, got ${args.length}`);
  const map = new Map<string, unknown>();
  if (args.length === 1) {
    const source = args[0];
    if (kindOf(source) !== K.Object) throw new TemplateDeopt('namespace from a list');
    for (const key of Object.keys(source as object)) map.set(key, (source as Record<string, unknown>)[key]);
  }
  if (kwargs !== undefined) for (const [key, value] of kwargs) map.set(key, value);
  return new TemplateNamespace(map);
}

function range(args: unknown[], kwargs: Kwargs | undefined): number[] {
  if (kwargs !== undefined || args.length === 0 || args.length > 3) throw new TemplateDeopt('range arguments');
  for (const a of args) if (kindOf(a) !== K.Integer) throw new TemplateDeopt('range of non-integers');
  let [start, stop, step] = args as number[];
  if (stop === undefined) [start, stop] = [0, start];
  step ??= 1;
  if (step === 0) throw new Error('range() step must not be zero');
  const out: number[] = [];
  for (let i = start!; step > 0 ? i < stop! : i > stop!; i += step) out.push(i);
  return out;
}

const pad2 = (n: number): string => (n < 10 ? `0${n}` : String(n));

/**
 * `strftime_now(format)`: the local time now, with the directives the interpreter knows (%Y %m %d %b %B %H
 * %M %%; any other left as written) and the default locale's month names, as it formats them.
 */
function strftimeNow(args: unknown[], kwargs: Kwargs | undefined): string {
  const format = args[0];
  if (kwargs !== undefined || typeof format !== 'string') throw new TemplateDeopt('strftime_now arguments');
  const now = new Date();
  return format.replace(/%[YmdbBHM%]/g, (d) => {
    switch (d) {
      case '%Y':
        return String(now.getFullYear());
      case '%m':
        return pad2(now.getMonth() + 1);
      case '%d':
        return pad2(now.getDate());
      case '%b':
        return new Intl.DateTimeFormat(undefined, { month: 'short' }).format(now);
      case '%B':
        return new Intl.DateTimeFormat(undefined, { month: 'long' }).format(now);
      case '%H':
        return pad2(now.getHours());
      case '%M':
        return pad2(now.getMinutes());
      default:
        return '%';
    }
  });
}

/** The interpreter's globals (besides the render's variables); `namespace` is in every scope. */
export const GLOBAL_VALUES: ReadonlyMap<string, unknown> = new Map<string, unknown>([
  ['false', false],
  ['true', true],
  ['none', null],
  ['False', false],
  ['True', true],
  ['None', null],
  ['range', range as TemplateFunction],
  ['strftime_now', strftimeNow as TemplateFunction],
  [
    'raise_exception',
    ((args) => {
      throw new Error(String(args));
    }) as TemplateFunction,
  ],
]);

/** Names the interpreter refuses as render variables ("Variable already declared"). */
export const RESERVED_NAMES: ReadonlySet<string> = new Set([...GLOBAL_VALUES.keys(), 'namespace']);

export class ExpressionCompiler {
  scope: Scope;

  constructor(globals: Scope) {
    this.scope = globals;
  }

  /** A read of `name`: the slots that may hold it, innermost first, ending at the global one. */
  identifier(name: string): Expr {
    if (name === 'namespace') return () => namespace;
    const chain: number[] = [];
    for (let sc: Scope | undefined = this.scope; sc !== undefined; sc = sc.parent) {
      const slot = sc.own(name);
      if (slot !== undefined) chain.push(slot);
    }
    const last = chain.pop()!;
    if (chain.length === 0) return (s) => s[last];
    if (chain.length === 1) {
      const a = chain[0]!;
      return (s) => (s[a] !== UNSET ? s[a] : s[last]);
    }
    return (s) => {
      for (const slot of chain) if (s[slot] !== UNSET) return s[slot];
      return s[last];
    };
  }

  expr(n: Node): Expr {
    switch (n.type) {
      case 'StringLiteral':
      case 'IntegerLiteral': {
        const v: unknown = n.value;
        return () => v;
      }
      case 'FloatLiteral': {
        const v = floatLiteral(n.value as number);
        return () => v;
      }
      case 'Identifier':
        return this.identifier(n.value as string);
      case 'ArrayLiteral':
        return this.arrayLiteral(n.value as Node[], false);
      case 'TupleLiteral':
        return this.arrayLiteral(n.value as Node[], true);
      case 'ObjectLiteral':
        return this.objectLiteral(n.value as Map<Node, Node>);
      case 'MemberExpression':
        return this.memberExpression(n);
      case 'CallExpression':
        return this.callExpression(n);
      case 'UnaryExpression':
        return this.unary(n);
      case 'BinaryExpression':
        return this.binaryExpression(n);
      case 'FilterExpression':
        return this.filter(n);
      case 'TestExpression':
        return this.test(n);
      case 'SelectExpression': {
        const [test, lhs] = [this.expr(n.test as Node), this.expr(n.lhs as Node)];
        return (s) => (truthy(test(s)) ? lhs(s) : undefined);
      }
      case 'Ternary': {
        const [c, t, f] = [n.condition, n.trueExpr, n.falseExpr].map((x: Node) => this.expr(x));
        return (s) => (truthy(c!(s)) ? t!(s) : f!(s));
      }
      default:
        throw new Unsupported(`expression ${n.type}`);
    }
  }

  private arrayLiteral(items: Node[], tuple: boolean): Expr {
    const parts = items.map((x) => this.expr(x));
    return (s) => {
      const a: unknown[] = tuple ? new TemplateTuple<unknown>() : [];
      for (const p of parts) a.push(p(s));
      return a;
    };
  }

  private objectLiteral(entries: Map<Node, Node>): Expr {
    const parts = [...entries].map(([k, v]) => [this.expr(k), this.expr(v)] as const);
    return (s) => {
      // A null prototype: a key `__proto__` is an entry, as in the interpreter's Map.
      const o = Object.create(null) as Record<string, unknown>;
      for (const [k, v] of parts) {
        const key = k(s);
        if (typeof key !== 'string') throw new Error('Object keys must be strings');
        // JS objects list integer-like keys first; the interpreter's Map keeps insertion order.
        if (/^(0|[1-9]\d*)$/.test(key)) throw new TemplateDeopt('integer-like key');
        o[key] = v(s);
      }
      return o;
    };
  }

  private memberExpression(n: Node): Expr {
    const object = this.expr(n.object as Node);
    const prop = n.property as Node;
    if (n.computed && prop.type === 'SliceExpression') {
      const [a, b, c] = [prop.start, prop.stop, prop.step].map((x: Node | undefined) =>
        x === undefined ? undefined : this.expr(x),
      );
      return (s) => sliceOf(object(s), a?.(s), b?.(s), c?.(s));
    }
    if (n.computed) {
      const key = this.expr(prop);
      return (s) => member(object(s), key(s));
    }
    const name: unknown = prop.value;
    return (s) => member(object(s), name);
  }

  /** Positional and keyword arguments; spreads keep the interpreter. */
  args(nodes: Node[]): (s: Slots) => [unknown[], Kwargs | undefined] {
    const positional: Expr[] = [];
    const keywords: [string, Expr][] = [];
    for (const a of nodes) {
      if (a.type === 'KeywordArgumentExpression') keywords.push([a.key.value as string, this.expr(a.value as Node)]);
      else if (a.type === 'SpreadExpression' || a.type === 'KeywordSpreadExpression') throw new Unsupported(a.type);
      else positional.push(this.expr(a));
    }
    if (new Set(keywords.map(([k]) => k)).size !== keywords.length) throw new Unsupported('repeated keyword');
    return (s) => {
      const args = positional.map((p) => p(s));
      if (keywords.length === 0) return [args, undefined];
      return [args, new Map(keywords.map(([k, v]) => [k, v(s)]))];
    };
  }

  private callExpression(n: Node): Expr {
    const args = this.args(n.args as Node[]);
    const callee = n.callee as Node;
    if (callee.type === 'MemberExpression' && !callee.computed && callee.property.type === 'Identifier') {
      const object = this.expr(callee.object as Node);
      const name = callee.property.value as string;
      return (s) => {
        const [a, kw] = args(s);
        return callMethod(object(s), name, a, kw);
      };
    }
    const fn = this.expr(callee);
    return (s) => {
      const [a, kw] = args(s);
      return call(fn(s), a, kw);
    };
  }

  private unary(n: Node): Expr {
    const arg = this.expr(n.argument as Node);
    const op = n.operator.value as string;
    if (op === 'not') return (s) => !truthy(arg(s));
    if (op === '-' || op === '+') return (s) => signed(op, arg(s));
    throw new Unsupported(`unary ${op}`);
  }

  private binaryExpression(n: Node): Expr {
    const [l, r] = [this.expr(n.left as Node), this.expr(n.right as Node)];
    const op = n.operator.value as string;
    switch (op) {
      case 'and':
        return (s) => {
          const a = l(s);
          return truthy(a) ? r(s) : a;
        };
      case 'or':
        return (s) => {
          const a = l(s);
          return truthy(a) ? a : r(s);
        };
      case '==':
        return (s) => looseEquals(l(s), r(s));
      case '!=':
        return (s) => !looseEquals(l(s), r(s));
      case '+':
        return (s) => {
          const a = l(s);
          return plus(a, r(s));
        };
      default:
        return (s) => binary(op, l(s), r(s));
    }
  }

  private filter(n: Node): Expr {
    const operand = this.expr(n.operand as Node);
    const f = n.filter as Node;
    if (f.type === 'Identifier') {
      const fn = FILTERS.get(f.value as string);
      if (fn === undefined) throw new Unsupported(`filter ${f.value}`);
      return (s) => fn(operand(s));
    }
    const name = f.callee.type === 'Identifier' ? (f.callee.value as string) : '';
    if (name === 'selectattr' || name === 'rejectattr') return this.selectAttr(operand, name, f.args as Node[]);
    const fn = CALL_FILTERS.get(name);
    if (fn === undefined) throw new Unsupported(`filter ${name || f.callee.type}(...)`);
    const args = this.args(f.args as Node[]);
    return (s) => {
      const v = operand(s);
      const [a, kw] = args(s);
      return fn(v, a, kw);
    };
  }

  private selectAttr(operand: Expr, name: string, args: Node[]): Expr {
    if (args.length < 1 || args.length > 3 || args.some((a) => a.type !== 'StringLiteral')) {
      throw new Unsupported(`${name} arguments`);
    }
    const [attr, test, value] = args.map((a) => a.value as string);
    let fn: ((a: unknown) => boolean) | undefined;
    if (test === undefined) fn = truthy;
    // The interpreter compares raw values strictly (`a.value === b.value`); without a value it fails.
    else if (test === 'equalto' || test === 'eq') fn = value === undefined ? undefined : (a) => a === value;
    else fn = TESTS.get(test);
    if (fn === undefined) throw new Unsupported(`${name} test ${test}`);
    const select = name === 'selectattr';
    return (s) => selectAttr(operand(s), select, attr!, fn);
  }

  private test(n: Node): Expr {
    const operand = this.expr(n.operand as Node);
    const fn = TESTS.get(n.test.value as string);
    if (fn === undefined) throw new Unsupported(`test ${n.test.value}`);
    return n.negate ? (s) => !fn(operand(s)) : (s) => fn(operand(s));
  }
}

/** A float literal is carried as a number only when it is not integral (`0.5`, not `1.0`). */
function floatLiteral(v: number): number {
  try {
    return floatResult(v);
  } catch {
    throw new Unsupported('integral float literal');
  }
}
