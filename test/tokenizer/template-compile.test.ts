/**
 * A chat template compiled to JavaScript renders exactly what
 * @huggingface/jinja's interpreter renders: every template the project is
 * tested with, over a corpus (system, multi-turn, tools with schemas, tool
 * calls with JSON-string and object arguments, reasoning content, unicode,
 * empty content, the generation prompt both ways, a final assistant message
 * continued, template errors) and a seeded random corpus, both renders side by
 * side on the same variables. Also: what makes a template keep the
 * interpreter, and the quirks of the interpreter the compiled form keeps.
 */
import { Template } from '@huggingface/jinja';
import { describe, expect, it, vi } from 'vitest';
import { seededRng } from '../../src/common/index.js';
import { isKvgateError } from '../../src/errors/index.js';
import { ChatTemplate, type ChatMessage } from '../../src/tokenizer/index.js';
import { compileTemplate, TemplateDeopt, type CompiledTemplate } from '../../src/tokenizer/template-compile.js';
import type { Node } from '../../src/tokenizer/template-expressions.js';
import { chatTemplates } from '../../bench/tokenizer/templates.js';

type Vars = Record<string, unknown>;
type Outcome = { text: string } | { error: true };

const TEMPLATES = chatTemplates();

function compiled(source: string): CompiledTemplate {
  const c = compileTemplate(new Template(source).parsed as unknown as Node);
  if (c.render === undefined) throw new Error(`not compiled: ${c.unsupported}`);
  return c.render;
}

function interpreted(source: string, vars: Vars): Outcome {
  try {
    return { text: new Template(source).render(vars) };
  } catch {
    return { error: true };
  }
}

function run(fn: CompiledTemplate, vars: Vars): Outcome {
  try {
    return { text: fn(vars).join('') };
  } catch {
    return { error: true };
  }
}

const TOOLS = [
  {
    type: 'function',
    function: {
      name: 'read_file',
      description: 'Reads a file — «UTF-8» 東京 😀 "quoted" \\ back\nslash',
      parameters: {
        type: 'object',
        properties: {
          path: { type: 'string', description: 'a path' },
          limit: { type: 'integer', minimum: 0, maximum: 1.5e3, default: 0.25 },
          flags: { type: 'array', items: { enum: ['a', 'b', null, true, false, -3] } },
          '10': { type: 'string' },
        },
        required: ['path'],
        additionalProperties: false,
      },
    },
  },
  { type: 'function', function: { name: 'noop', parameters: {} } },
];

const sys = { role: 'system', content: 'You are a coding agent. Be exact.' };
const user = (content: string) => ({ role: 'user', content });
const assistant = (content: string | null, extra: Vars = {}) => ({ role: 'assistant', content, ...extra });
const call = (name: string, args: unknown, id = 'call_1') => ({
  id,
  type: 'function',
  function: { name, arguments: args },
});

/** Conversations by name: messages, and the render options beside them. */
const CORPUS: Record<string, { messages: Vars[]; tools?: unknown[]; agp?: boolean; extra?: Vars }> = {
  'system and one user turn': { messages: [sys, user('hello')] },
  'user only': { messages: [user('hi')] },
  'multi-turn': {
    messages: [sys, user('a'), assistant('b'), user('c'), assistant('d'), user('e')],
  },
  'unicode and whitespace': {
    messages: [user('  naïve 東京 größe 😀 e\u0301 שלום \n\n'), assistant('\n 😀 \t'), user('\u0000x\u2028y')],
  },
  'empty content': { messages: [sys, user(''), assistant(''), user('')] },
  'reasoning content': {
    messages: [
      sys,
      user('q1'),
      assistant('a1', { reasoning_content: 'thought 1' }),
      user('q2'),
      assistant('a2', { reasoning_content: '\nthought 2\n' }),
    ],
    agp: false,
  },
  'reasoning inside content': {
    messages: [user('q'), assistant('<think>\nplan\n</think>\n\nanswer'), user('q2'), assistant('x</think>y')],
  },
  'tools with schemas': { messages: [sys, user('read it')], tools: TOOLS },
  'tool calls with JSON-string arguments': {
    messages: [
      sys,
      user('read'),
      assistant('', { tool_calls: [call('read_file', '{"path": "a.ts", "note": "ü \\"q\\""}')] }),
      { role: 'tool', tool_call_id: 'call_1', name: 'read_file', content: 'file body' },
      { role: 'tool', tool_call_id: 'call_2', name: 'read_file', content: 'second' },
      user('thanks'),
    ],
    tools: TOOLS,
  },
  'tool calls with object arguments': {
    messages: [
      user('go'),
      assistant('calling', {
        tool_calls: [
          call('read_file', { path: 'b.ts', n: [1, 2.5, null, true], nested: { '2': 'x', a: {} } }),
          call('noop', {}, 'call_2'),
        ],
      }),
      { role: 'tool', content: '<tool_response>ok</tool_response>' },
    ],
    tools: TOOLS,
  },
  'tool calls without content (deepseek style)': {
    messages: [user('go'), assistant(null, { tool_calls: [call('noop', '{}')] }), { role: 'tool', content: 'r' }],
  },
  'a final assistant message continued': { messages: [sys, user('q'), assistant('The answer is')], agp: false },
  'thinking off': { messages: [user('q')], extra: { enable_thinking: false } },
  'thinking on': { messages: [user('q')], extra: { enable_thinking: true } },
  'tool response as the last user message': {
    messages: [user('q'), assistant('a'), user('<tool_response>r</tool_response>')],
  },
  'roles out of order (gemma raises)': { messages: [user('a'), user('b')] },
  'a system message later on': { messages: [user('a'), sys, assistant('b')] },
};

function corpusVars(name: string, t: (typeof TEMPLATES)[string]): Vars {
  const c = CORPUS[name]!;
  const vars: Vars = {
    ...c.extra,
    // As ChatTemplate passes them: content flattened to a string.
    messages: c.messages.map((m) => ({ ...m, content: m.content ?? '' })),
    add_generation_prompt: c.agp ?? true,
    bos_token: t.bos,
    eos_token: t.eos,
  };
  if (c.tools !== undefined) vars.tools = c.tools;
  return vars;
}

const WORDS = ['route', 'the', 'naïve', '東京', '😀', 'e\u0301', '{"k": 1}', '\n', '  ', '</think>', '<think>', 'x'];

/** Tool-call arguments as objects: numbers of every kind, integer-like and unicode keys, nesting, empties. */
const ARGUMENTS: ((q: string, n: number) => unknown)[] = [
  (q, n) => ({ q, n }),
  (q, n) => ({ '1': q, b: n / 4, ключ: [n, -0, 1e21, 0.1 + 0.2, null, true, { x: [] }] }),
  () => ({}),
  (q) => [q, { '': q }],
];

function randomConversation(rnd: () => number): Vars {
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rnd() * xs.length)]!;
  const words = (n: number) => Array.from({ length: 1 + Math.floor(rnd() * n) }, () => pick(WORDS)).join(' ');
  const messages: Vars[] = [];
  if (rnd() < 0.5) messages.push({ role: 'system', content: words(20) });
  const turns = 1 + Math.floor(rnd() * 8);
  for (let i = 0; i < turns; i++) {
    messages.push(user(rnd() < 0.1 ? `<tool_response>${words(5)}</tool_response>` : words(10)));
    const extra: Vars = {};
    if (rnd() < 0.3) extra.reasoning_content = rnd() < 0.2 ? null : words(8);
    if (rnd() < 0.3) {
      const args = rnd() < 0.5 ? JSON.stringify({ q: words(3) }) : pick(ARGUMENTS)(words(3), Math.floor(rnd() * 9));
      extra.tool_calls = rnd() < 0.1 ? [] : [call(pick(['read_file', 'noop']), args, `c${i}`)];
    }
    if (rnd() < 0.9 || i < turns - 1) messages.push(assistant(rnd() < 0.2 ? '' : words(10), extra));
    if (extra.tool_calls !== undefined && rnd() < 0.7)
      messages.push({ role: 'tool', name: 'read_file', content: words(6) });
    if (rnd() < 0.05) messages.push({ role: pick(['system', 'developer', 'user']), content: words(4) });
  }
  const vars: Vars = { messages, add_generation_prompt: rnd() < 0.7 };
  if (rnd() < 0.3) vars.tools = rnd() < 0.2 ? [] : TOOLS;
  if (rnd() < 0.3) vars.enable_thinking = rnd() < 0.5;
  return vars;
}

describe.each(Object.keys(TEMPLATES))('the compiled %s template', (name) => {
  const t = TEMPLATES[name]!;

  it('compiles', () => {
    const c = compileTemplate(new Template(t.source).parsed as unknown as Node);
    expect(c.render === undefined ? c.unsupported : 'compiled').toBe('compiled');
  });

  it.each(Object.keys(CORPUS))('renders "%s" as the interpreter does', (conv) => {
    const vars = corpusVars(conv, t);
    expect(run(compiled(t.source), vars)).toEqual(interpreted(t.source, vars));
  });

  it('renders 300 seeded random conversations as the interpreter does, the text or an error', () => {
    const rnd = seededRng(7);
    const fn = compiled(t.source);
    let texts = 0;
    for (let i = 0; i < 300; i++) {
      const vars = { ...randomConversation(rnd), bos_token: t.bos, eos_token: t.eos };
      const want = interpreted(t.source, vars);
      expect(run(fn, vars), `conversation ${i}`).toEqual(want);
      if ('text' in want) texts++;
    }
    // Most conversations render (Gemma refuses roles that do not alternate).
    expect(texts).toBeGreaterThan(name === 'gemma 3' ? 20 : 250);
  });

  it('renders through ChatTemplate without handing any render to the interpreter', () => {
    const ct = new ChatTemplate(t.source, { bosToken: t.bos, eosToken: t.eos });
    expect(ct.interpretedBecause).toBeUndefined();
    const messages = [sys, user('q'), assistant('a', { reasoning_content: 'r' }), user('q2')] as ChatMessage[];
    const want = new Template(t.source).render({
      messages,
      add_generation_prompt: true,
      bos_token: t.bos,
      eos_token: t.eos,
      tools: TOOLS,
    });
    expect(ct.render(messages, { tools: TOOLS })).toBe(want);
    expect(ct.fallbacks).toBe(0);
  });
});

describe('a template error', () => {
  it('is KVG_ERR_INVALID_ARGUMENT with the interpreter message, compiled or not', () => {
    const ct = new ChatTemplate(TEMPLATES['gemma 3']!.source);
    expect(ct.interpretedBecause).toBeUndefined();
    let err: unknown;
    try {
      ct.render([user('a'), user('b')] as ChatMessage[]);
    } catch (e) {
      err = e;
    }
    expect(isKvgateError(err) && err.code).toBe('KVG_ERR_INVALID_ARGUMENT');
    expect((err as Error).message).toContain('Conversation roles must alternate user/assistant/user/assistant/...');
  });
});

/** Small templates, each rendered both ways over VARS: the same text (or both an error). */
const QUIRKS: [string, string][] = [
  [
    'break and continue drop what their iteration printed',
    '{% for x in xs %}a{{ x }}{% if x == 2 %}{% continue %}{% endif %}{% if x == 3 %}{% break %}{% endif %}b{% endfor %}',
  ],
  ['for-else when every iteration continues', '{% for x in xs %}{% continue %}{% else %}none{% endfor %}'],
  [
    'loop attributes',
    '{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.previtem }}{{ loop.nextitem }};{% endfor %}',
  ],
  ['for with an if filter', '{% for x in xs if x > 1 %}{{ x }}{{ loop.length }}{% endfor %}'],
  ['sets in a loop stay in it', "{% set y = 'out' %}{% for x in xs %}{{ y }}{% set y = x %}{{ y }}{% endfor %}{{ y }}"],
  [
    'namespace carries out of a loop',
    '{% set ns = namespace(n=0, s="") %}{% for x in xs %}{% set ns.n = ns.n + x %}{% endfor %}{{ ns.n }}{{ ns }}',
  ],
  [
    'tuple unpacking over items',
    '{% for k, v in obj.items() %}{{ k }}={{ v }},{% endfor %}{% for k, v in obj | items %}{{ k }}{% endfor %}',
  ],
  ['a mapping iterated gives its keys', '{% for k in obj %}{{ k }}{% endfor %}'],
  [
    'tojson formatting and key order',
    "{{ obj | tojson }}|{{ obj | tojson(indent=2) }}|{{ obj | tojson(sort_keys=true, separators=(',', ':')) }}|{{ '東京' | tojson(ensure_ascii=true) }}",
  ],
  [
    'printing containers and scalars',
    '{{ xs }}{{ obj }}{{ true }}{{ none }}{{ undefined_name }}{{ 7 }}{{ 2.5 }}{{ -0 }}',
  ],
  [
    '+ and ~ on strings, numbers, lists',
    "{{ 'a' + 1 }}{{ 1 + 2 }}{{ 'n' ~ xs }}{{ xs + xs }}{{ 'x' + obj }}{{ 7 // 2 }}{{ -7 % 3 }}",
  ],
  [
    '+ chains, printed as pieces',
    "{{ 'a' + 'b' + 'c' }}|{{ 'a' + 1 + 'b' }}|{{ 1 + 2 + 'x' }}|{{ 'x' + xs + 'y' }}|{{ xs + xs + xs }}|{{ '' + '' + 'z' }}|{{ ('a' + 'b') + ('c' + 'd') }}|{{ 2.5 + 'f' + 1 }}",
  ],
  ['errors: + with an undefined operand mid-chain', "{{ 'a' + 'b' + undefined_name + 'c' }}"],
  ['errors: + with none mid-chain', "{{ 'a' + none + 'c' }}"],
  [
    'comparison and membership',
    "{{ 1 < 2 }}{{ 'a' in 'cat' }}{{ 'a' in obj }}{{ 2 in xs }}{{ 9 not in xs }}{{ 'q' in undefined_name }}{{ 1 == true }}{{ none == undefined_name }}",
  ],
  ['truthiness of empty containers', '{{ [] or "e" }}{{ {} and 1 }}{{ "" or 0 }}{{ xs and "y" }}{{ not [] }}'],
  [
    'tests',
    "{{ xs is iterable }}{{ obj is mapping }}{{ 's' is string }}{{ 1 is number }}{{ none is none }}{{ x is defined }}{{ 3 is odd }}{{ 'ab' is lower }}{{ (1, 2) is iterable }}{{ obj is sequence }}",
  ],
  [
    'string methods',
    "{{ ' a b '.strip() }}|{{ '\\na\\n'.strip('\\n') }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a-b-c'.split('-', 1) }}|{{ 'aXbX'.replace('X', 'y', 1) }}|{{ 'Ab'.upper() }}{{ 'Ab'.lower() }}|{{ 'hello world'.title() }}|{{ 'x'.startswith(('a', 'x')) }}|{{ 'abc'.endswith('c') }}",
  ],
  [
    'slices and indexing',
    "{{ xs[::-1] }}{{ xs[1:] }}{{ xs[-1] }}{{ 'h😀llo'[::-1] }}{{ 'abc'[1] }}{{ xs[:-1] }}{{ xs[::2] }}{{ xs[5] }}",
  ],
  [
    'filters',
    "{{ xs | length }}{{ 'ab' | length }}{{ obj | length }}{{ ' t ' | trim }}{{ xs | join(', ') }}{{ xs | join }}{{ xs | first }}{{ xs | last }}{{ xs | reverse }}{{ 1 | string }}{{ xs | string }}",
  ],
  [
    'default',
    "{{ undefined_name | default('d') }}{{ '' | default('d', true) }}{{ 0 | default('d') }}{{ none | default('n') }}",
  ],
  [
    'selectattr',
    "{{ msgs | selectattr('role') | list }}{{ msgs | selectattr('content', 'string') | length }}{{ msgs | rejectattr('x') | length }}",
  ],
  [
    'selectattr equalto, map attribute',
    "{{ msgs | selectattr('role', 'equalto', 'user') | list }}{{ msgs | rejectattr('role', 'eq', 'user') | length }}" +
      "{{ msgs | map(attribute='content') | list }}{{ msgs | map(attribute='x', default='-') | join(',') }}" +
      "{{ [obj] | map(attribute='b.2') | first }}{{ [obj] | map(attribute='c.d') | first }}",
  ],
  ['map of non-objects is an error', "{{ xs | map(attribute='a') | list }}"],
  [
    'mapping methods',
    "{{ obj.get('a') }}{{ obj.get('zz', 'dflt') }}{{ obj.get('zz') }}{{ obj.keys() }}{{ obj.values() }}",
  ],
  ['ternary and select', "{{ 'y' if xs else 'n' }}{{ 'z' if [] }}|{{ ('a' if false) is defined }}"],
  ['set blocks capture text', '{% set t %}{% for x in xs %}<{{ x }}>{% endfor %}{% endset %}[{{ t }}]'],
  ['raise_exception', "{{ raise_exception('bad: ' ~ xs | length) }}"],
  ['errors: comparison of strings with numbers', "{{ 'a' < 1 }}"],
  ['errors: for over a string', '{% for c in "abc" %}{{ c }}{% endfor %}'],
  ['errors: tojson of a tuple', '{{ (1, 2) | tojson }}'],
  ['errors: break outside a loop', '{% break %}'],
  ['floats that are not integral', '{{ 2.5 + 1 }}{{ f * 2 }}{{ f }}{{ f | tojson }}'],
  [
    'tuples turn into lists',
    '{{ ((1, 2) + [3]) is iterable }}{{ ((1, 2) | reverse) is iterable }}{{ ((1, 2) + (3, 4)) is iterable }}{{ ((msgs[0], msgs[1]) | selectattr("role")) is iterable }}',
  ],
  ['member access on scalars', '{{ none.x }}{{ undefined_name.y }}{{ 3.x }}{{ obj.nope }}{{ obj.items is defined }}'],
];

const QUIRK_VARS: Vars = {
  xs: [1, 2, 3, 4],
  obj: { a: 1, b: [true, null, 'ü'], c: { d: 'e' }, '2': 'two' },
  msgs: [
    { role: 'user', content: 'a' },
    { role: '', content: 3 },
    { content: 'c', x: 0 },
  ],
  f: 0.75,
};

describe('a sum printed as pieces', () => {
  it("appends each string operand as a piece of its own, so a message's content is one piece", () => {
    const fn = compiled(
      "{% for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>' + '\\n' }}{% endfor %}",
    );
    const content = 'the same words '.repeat(100);
    expect(fn({ messages: [{ role: 'user', content }] })).toEqual([
      '<|im_start|>',
      'user',
      '\n',
      content,
      '<|im_end|>',
      '\n',
    ]);
    // From the first operand that is not a string, the sum is one value again, as `+` computes it.
    expect(fn({ messages: [{ role: 'user', content: 7 }] })).toEqual(['<|im_start|>user\n7<|im_end|>\n']);
  });
});

describe('the interpreter quirks a compiled template keeps', () => {
  it('strftime_now formats the time now as the interpreter does', () => {
    vi.useFakeTimers({ toFake: ['Date'] });
    try {
      for (const at of ['2026-01-05T03:04:05', '2026-11-27T23:59:00']) {
        vi.setSystemTime(new Date(at));
        const source = "{{ strftime_now('%Y-%m-%d %H:%M %b %B %% %x %y') }}{{ strftime_now is defined }}";
        const want = interpreted(source, {});
        expect(want).toHaveProperty('text');
        expect(run(compiled(source), {})).toEqual(want);
      }
    } finally {
      vi.useRealTimers();
    }
  });

  it.each(QUIRKS)('%s', (_name, source) => {
    expect(run(compiled(source), QUIRK_VARS)).toEqual(interpreted(source, QUIRK_VARS));
  });

  it.each([
    ['an integral float', '{{ f + f }}', '1.0'],
    ['a division', '{{ 4 / 2 }}', '2.0'],
    ['integer-like keys in an object literal', "{{ {'b': 1, '1': 2} | tojson }}", '{"b": 1, "1": 2}'],
    ['a loop used as a value', '{% for x in [1] %}{{ loop | tojson }}{% endfor %}', '"index": 1'],
    ['an equality of containers', '{{ messages[0] == messages[0] }}', 'true'],
    ['a mapping get with keyword arguments', "{{ messages[0].get('zz', default=1) is mapping }}", 'true'],
  ])('hands a render with %s to the interpreter, which gives the text', (_name, source, part) => {
    const ct = new ChatTemplate(source);
    expect(ct.interpretedBecause).toBeUndefined();
    const vars = { messages: [{ role: 'user', content: 'hi' }], add_generation_prompt: true, f: 0.5 };
    expect(() => compiled(source)({ ...vars, bos_token: '', eos_token: '' })).toThrow(TemplateDeopt);
    const text = ct.render(vars.messages, { extra: { f: 0.5 } });
    expect(text).toBe(new Template(source).render({ ...vars, bos_token: '', eos_token: '' }));
    expect(text).toContain(part);
    expect(ct.fallbacks).toBe(1);
  });

  it.each([
    ['a macro', '{% macro m(x) %}{{ x }}{% endmacro %}{{ m(1) }}', 'Macro'],
    ['a filter block', '{% filter upper %}x{% endfilter %}', 'FilterStatement'],
    ['an unknown filter', '{{ xs | dictsort }}', 'filter dictsort'],
    ['an unknown test', '{{ x is escaped }}', 'test escaped'],
    ['an integral float literal', '{{ 1.0 }}', 'integral float literal'],
    ['an assignment to namespace', '{% set namespace = 1 %}', 'assignment to namespace'],
  ])('keeps the interpreter for %s, naming it', (_name, source, construct) => {
    const logged: Record<string, unknown>[] = [];
    const logger = {
      error: () => {},
      warn: () => {},
      info: () => {},
      debug: (fields: Record<string, unknown>) => logged.push(fields),
      child: () => logger,
    };
    const ct = new ChatTemplate(source, { logger });
    expect(ct.interpretedBecause).toBe(construct);
    expect(logged).toEqual([{ construct }]);
  });
});
