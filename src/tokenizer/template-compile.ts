/**
 * A chat template's syntax tree (as @huggingface/jinja parses it) compiled once
 * into a tree of JavaScript closures over plain values: no runtime-value
 * wrappers, no scope object per step, `loop` computed when read. The render of
 * a long conversation then costs what its text costs, not the interpreter's
 * microsecond per value.
 *
 * Contract: `compileTemplate` returns undefined, with the construct that forced
 * it, for anything it does not reproduce (macros, call blocks, filter blocks,
 * filters and tests outside `template-builtins.ts`, integral float literals,
 * assignments to `namespace`); the template then keeps the interpreter. A
 * compiled render throws where the interpreter's would, or `TemplateDeopt` where
 * the exact result needs what the plain values do not carry: the caller then
 * renders with the interpreter, which gives the same text or the same error.
 */
import {
  ExpressionCompiler,
  GLOBAL_VALUES,
  RESERVED_NAMES,
  Scope,
  UNSET,
  Unsupported,
} from './template-expressions.js';
import type { Node, Slots } from './template-expressions.js';
import {
  isArray,
  K,
  kindOf,
  LoopState,
  plus,
  printed,
  TemplateDeopt,
  TemplateNamespace,
  truthy,
} from './template-values.js';

export { TemplateDeopt } from './template-values.js';

/** What a statement ends with: on, or a `break` / `continue` on its way to the enclosing loop. */
const enum Signal {
  Next = 0,
  Break = 1,
  Continue = 2,
}
/**
 * The text rendered so far, as its pieces in order: appended by a push, rewound by cutting the list back. Kept as
 * pieces, not one string, so that a caller comparing a render with the previous one compares pieces (a message's
 * content is the same string object turn after turn) and never needs the whole text as one flat string.
 */
interface Out {
  parts: string[];
}
type Stmt = (s: Slots, out: Out) => Signal;

/** A compiled template: the render's variables (as `Template.render` takes them) to the text's pieces, in order. */
export type CompiledTemplate = (vars: Readonly<Record<string, unknown>>) => string[];

export type CompileResult = { render: CompiledTemplate } | { render: undefined; unsupported: string };

/** Names a statement list assigns in the scope it runs in (if and set bodies included, for bodies not). */
function assignedNames(stmts: readonly Node[], into: Set<string>): Set<string> {
  for (const st of stmts) {
    if (st.type === 'Set') {
      const a = st.assignee as Node;
      if (a.type === 'Identifier') into.add(a.value as string);
      else if (a.type === 'TupleLiteral') for (const x of a.value as Node[]) into.add(x.value as string);
      assignedNames(st.body as Node[], into);
    } else if (st.type === 'If') {
      assignedNames(st.body as Node[], into);
      assignedNames(st.alternate as Node[], into);
    }
  }
  return into;
}

function loopNames(loopvar: Node): string[] {
  if (loopvar.type === 'Identifier') return [loopvar.value as string];
  if (loopvar.type === 'TupleLiteral' && (loopvar.value as Node[]).every((x) => x.type === 'Identifier')) {
    return (loopvar.value as Node[]).map((x) => x.value as string);
  }
  throw new Unsupported('loop variables');
}

class StatementCompiler extends ExpressionCompiler {
  nslots = 0;
  readonly globals: Scope;

  constructor() {
    const alloc = (): number => this.nslots++;
    const globals = new Scope(undefined, alloc);
    super(globals);
    this.globals = globals;
  }

  block(stmts: readonly Node[]): Stmt {
    const parts = stmts.map((st) => this.statement(st));
    if (parts.length === 1) return parts[0]!;
    return (s, out) => {
      for (const p of parts) {
        const sig = p(s, out);
        if (sig !== Signal.Next) return sig;
      }
      return Signal.Next;
    };
  }

  statement(n: Node): Stmt {
    switch (n.type) {
      case 'StringLiteral': {
        const text = n.value as string;
        return (_s, out) => (out.parts.push(text), Signal.Next);
      }
      case 'Comment':
        return () => Signal.Next;
      case 'Break':
        return () => Signal.Break;
      case 'Continue':
        return () => Signal.Continue;
      case 'If': {
        const [test, body, alt] = [this.expr(n.test as Node), this.block(n.body as Node[]), this.block(n.alternate)];
        return (s, out) => (truthy(test(s)) ? body(s, out) : alt(s, out));
      }
      case 'For':
        return this.forStatement(n);
      case 'Set':
        return this.setStatement(n);
      case 'Program':
      case 'Macro':
      case 'CallStatement':
      case 'FilterStatement':
        throw new Unsupported(n.type);
      default:
        return n.type === 'BinaryExpression' && n.operator.value === '+' ? this.printSum(n) : this.print(n);
    }
  }

  /** `{{ expr }}`: its value printed; nothing for undefined and none. */
  private print(n: Node): Stmt {
    const e = this.expr(n);
    return (s, out) => {
      const v = e(s);
      if (v !== undefined && v !== null) out.parts.push(printed(v));
      return Signal.Next;
    };
  }

  /**
   * `{{ a + b + ... }}`: while the operands are strings, each is appended as a piece of its own, so a message's
   * content stays the request's own string object and the next turn's comparison of the pieces is a pointer
   * comparison (a concatenation is a new string every render, compared character by character). From the first
   * operand that is not a string, the sum goes on as `+` computes it, left to right. The operands are evaluated
   * once each, in the same order, and the pieces join to the text `print` would give.
   */
  private printSum(n: Node): Stmt {
    const right: Node[] = [];
    let left = n;
    while (left.type === 'BinaryExpression' && left.operator.value === '+') {
      right.push(left.right as Node);
      left = left.left as Node;
    }
    const operands = [left, ...right.reverse()].map((o) => this.expr(o));
    return (s, out) => {
      const mark = out.parts.length;
      let i = 0;
      let v: unknown;
      for (; i < operands.length; i++) {
        v = operands[i]!(s);
        if (typeof v !== 'string') break;
        if (v !== '') out.parts.push(v);
      }
      if (i === operands.length) return Signal.Next;
      // Operand i is the first that is not a string: the strings before it are one string again.
      let sum = i === 0 ? v : plus(out.parts.splice(mark).join(''), v);
      for (i++; i < operands.length; i++) sum = plus(sum, operands[i]!(s));
      if (sum !== undefined && sum !== null) out.parts.push(printed(sum));
      return Signal.Next;
    };
  }

  /** Stores a value under a name of the current scope. */
  private assign(name: string): (s: Slots, v: unknown) => void {
    if (name === 'namespace') throw new Unsupported('assignment to namespace');
    const slot = this.scope.own(name);
    if (slot === undefined) throw new Error(`kvgate template compiler: ${name} not declared in its scope`);
    return (s, v) => {
      s[slot] = v;
    };
  }

  private setStatement(n: Node): Stmt {
    const value = n.value ? this.expr(n.value as Node) : undefined;
    const body = value === undefined ? this.block(n.body as Node[]) : undefined;
    const store = this.assignee(n.assignee as Node);
    if (value !== undefined) return (s) => (store(s, value(s)), Signal.Next);
    return (s) => {
      const captured: Out = { parts: [] };
      const sig = body!(s, captured);
      if (sig !== Signal.Next) return sig;
      store(s, captured.parts.join(''));
      return Signal.Next;
    };
  }

  private assignee(a: Node): (s: Slots, v: unknown) => void {
    if (a.type === 'Identifier') return this.assign(a.value as string);
    if (a.type === 'TupleLiteral') {
      const stores = loopNames(a).map((name) => this.assign(name));
      return (s, v) => {
        if (!isArray(kindOf(v))) throw new Error('Cannot unpack non-iterable type in set');
        const arr = v as unknown[];
        if (arr.length !== stores.length) throw new Error('Wrong number of items to unpack in set');
        stores.forEach((st, i) => st(s, arr[i]));
      };
    }
    if (a.type === 'MemberExpression' && a.property.type === 'Identifier') {
      const object = this.expr(a.object as Node);
      const key = a.property.value as string;
      return (s, v) => {
        const o = object(s);
        if (!(o instanceof TemplateNamespace)) throw new Error('cannot assign attribute on non-namespace object');
        o.map.set(key, v);
      };
    }
    throw new Unsupported(`assignment to ${a.type}`);
  }

  /** Runs `fn` with a new scope declaring `names`; returns its result and the scope's slot range. */
  private inScope<T>(names: Iterable<string>, fn: () => T): [T, number, number] {
    const outer = this.scope;
    this.scope = new Scope(outer, () => this.nslots++);
    const lo = this.nslots;
    for (const name of names) this.scope.declare(name);
    const hi = this.nslots;
    try {
      return [fn(), lo, hi];
    } finally {
      this.scope = outer;
    }
  }

  private forStatement(n: Node): Stmt {
    const names = loopNames(n.loopvar as Node);
    const body = n.body as Node[];
    const declared = assignedNames(n.defaultBlock as Node[], assignedNames(body, new Set([...names, 'loop'])));
    if (declared.has('namespace')) throw new Unsupported('assignment to namespace');
    const [parts, lo, hi] = this.inScope(declared, () => {
      const selectNode = n.iterable.type === 'SelectExpression' ? (n.iterable as Node) : undefined;
      const iterable = this.expr(selectNode ? (selectNode.lhs as Node) : (n.iterable as Node));
      const test = selectNode ? this.inScope(names, () => this.selectTest(names, selectNode)) : undefined;
      const bind = this.loopBinding(names);
      const loop = this.scope.own('loop')!;
      return { iterable, test, bind, loop, run: this.block(body), otherwise: this.block(n.defaultBlock as Node[]) };
    });
    const { iterable, test, bind, loop, run, otherwise } = parts;
    return (s, out) => {
      for (let i = lo; i < hi; i++) s[i] = UNSET;
      let items = iterationItems(iterable(s));
      if (test !== undefined) items = items.filter((item) => test[0](s, item));
      let none = true;
      for (let i = 0; i < items.length; i++) {
        s[loop] = new LoopState(i, items);
        bind(s, items[i]);
        // The interpreter drops what an iteration printed before its break or continue: so does this.
        const mark = out.parts.length;
        const sig = run(s, out);
        if (sig !== Signal.Next) {
          out.parts.length = mark;
          if (sig === Signal.Break) break;
          continue;
        }
        none = false;
      }
      return none ? otherwise(s, out) : Signal.Next;
    };
  }

  /** The `if` of `for x in xs if test`: run per item in a scope holding only the loop variables. */
  private selectTest(names: string[], select: Node): (s: Slots, item: unknown) => boolean {
    const bind = this.loopBinding(names);
    const test = this.expr(select.test as Node);
    return (s, item) => {
      bind(s, item);
      return truthy(test(s));
    };
  }

  private loopBinding(names: string[]): (s: Slots, item: unknown) => void {
    const slots = names.map((name) => this.scope.own(name)!);
    if (slots.length === 1) {
      const slot = slots[0]!;
      return (s, item) => {
        s[slot] = item;
      };
    }
    return (s, item) => {
      if (kindOf(item) !== K.Array) throw new Error('Cannot unpack non-iterable type');
      const arr = item as unknown[];
      if (arr.length !== slots.length) throw new Error('Wrong number of items to unpack');
      slots.forEach((slot, i) => (s[slot] = arr[i]));
    };
  }

  /** The render: globals and variables into their slots, the program, the text. */
  program(root: Node): CompiledTemplate {
    const run = this.block(root.body as Node[]);
    const globals = [...this.globals.slots];
    const size = this.nslots;
    return (vars) => {
      for (const key in vars) if (RESERVED_NAMES.has(key)) throw new TemplateDeopt('reserved variable name');
      const s: Slots = new Array<unknown>(size).fill(UNSET);
      for (const [name, slot] of globals) {
        s[slot] = Object.prototype.hasOwnProperty.call(vars, name) ? vars[name] : GLOBAL_VALUES.get(name);
      }
      const out: Out = { parts: [] };
      if (run(s, out) !== Signal.Next) throw new Error('break or continue outside a loop');
      return out.parts;
    };
  }
}

/** What a for statement iterates: a list's items, a mapping's keys; anything else is an error. */
function iterationItems(v: unknown): unknown[] {
  const k = kindOf(v);
  if (isArray(k)) return v as unknown[];
  if (k === K.Object) return Object.keys(v as object);
  if (k === K.Loop) throw new TemplateDeopt('loop iterated');
  throw new Error('Expected iterable or object type in for loop');
}

/** Compiles a parsed template (`new Template(source).parsed`) once. */
export function compileTemplate(program: Node): CompileResult {
  try {
    return { render: new StatementCompiler().program(program) };
  } catch (err) {
    if (err instanceof Unsupported) return { render: undefined, unsupported: err.message };
    throw err;
  }
}
