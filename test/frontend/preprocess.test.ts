import { readFileSync } from 'node:fs';
import { Template } from '@huggingface/jinja';
import { Tokenizer } from 'tokenizers';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ModelPreprocessor } from '../../src/frontend/preprocess/model-preprocessor.js';
import {
  INLINE_MAX_CHARS,
  createPreprocessor,
  taskTextChars,
  type Preprocessor,
} from '../../src/frontend/preprocess/preprocessor.js';
import type { ChatTask, PreprocessModelSpec } from '../../src/frontend/preprocess/protocol.js';
import { SegmentTokenizer, splitTokensOf } from '../../src/frontend/preprocess/segment-tokenizer.js';
import { isKvgateError } from '../../src/errors/index.js';
import { demoTokenizerFiles, fallbackTokenizer, fallbackEncode, loadTokenizer } from '../../src/tokenizer/index.js';
import { promptHashes } from '../../src/wasm/index.js';
import { mulberry32 } from '../helpers/rng.js';

const files = demoTokenizerFiles();
const spec: PreprocessModelSpec = {
  name: 'demo',
  blockSize: 16,
  tokenizer: { kind: 'demo' },
  segmentCacheTokens: 1_000_000,
  segmentCacheBytes: 64 * 1024 * 1024,
};

/** The reference: the chat template rendered with @huggingface/jinja and tokenized by the native tokenizer, no kvgate code. */
const reference = (() => {
  const tok = Tokenizer.fromFile(files.tokenizerJson);
  const cfg = JSON.parse(readFileSync(files.tokenizerConfig, 'utf8')) as { chat_template: string; eos_token: string };
  const template = new Template(cfg.chat_template);
  return {
    async chat(messages: unknown[], extra: Record<string, unknown> = {}, tools?: unknown[]): Promise<number[]> {
      const text = template.render({
        ...extra,
        messages,
        add_generation_prompt: true,
        bos_token: '',
        eos_token: cfg.eos_token,
        ...(tools ? { tools } : {}),
      });
      return (await tok.encode(text, null, { addSpecialTokens: false })).getIds();
    },
    async text(prompt: string): Promise<number[]> {
      return (await tok.encode(prompt, null, { addSpecialTokens: true })).getIds();
    },
  };
})();

const CHATS: { messages: { role: string; content: string }[]; extra?: Record<string, unknown>; tools?: unknown[] }[] = [
  { messages: [{ role: 'user', content: 'Hello!' }] },
  {
    messages: [
      { role: 'system', content: 'You are terse.' },
      { role: 'user', content: 'What is 2+2?' },
    ],
  },
  {
    messages: [
      { role: 'system', content: 'You are a helpful assistant.' },
      { role: 'user', content: 'Write a haiku about the sea.' },
      { role: 'assistant', content: 'Waves fold into foam,\nsalt wind carries gull voices,\nthe tide keeps its time.' },
      { role: 'user', content: 'Now one about mountains, in French.' },
    ],
  },
  { messages: [{ role: 'user', content: 'Ünïcödé, 日本語のテキスト, emoji 😀🚀 and  double  spaces\n\n\ttabs.' }] },
  {
    messages: [
      { role: 'user', content: '  leading and trailing whitespace  ' },
      { role: 'assistant', content: '' },
      { role: 'user', content: '<not a special token> <|im_start|> inside text' },
    ],
  },
  { messages: [{ role: 'user', content: 'Think quietly.' }], extra: { enable_thinking: false } },
  {
    messages: [{ role: 'user', content: 'Weather in Paris?' }],
    tools: [
      {
        type: 'function',
        function: {
          name: 'get_weather',
          description: 'Weather for a city',
          parameters: { type: 'object', properties: { city: { type: 'string' } } },
        },
      },
    ],
  },
];

function chatTask(messages: unknown[], extra?: Record<string, unknown>, tools?: unknown[]): ChatTask {
  return { kind: 'chat', model: 'demo', messages, chatTemplateKwargs: extra, tools, maxPromptTokens: 1_000_000 };
}

describe('preprocessing: token ids equal direct tokenization with the same tokenizer', () => {
  let pre: ModelPreprocessor;
  beforeAll(async () => {
    pre = await ModelPreprocessor.create(spec);
  });

  it('the Qwen3 tokenizer passes the segment exactness probe', () => {
    expect(pre.segmentCache).toBe(true);
  });

  it('chat requests: template + tokenize equal the reference, and hashes equal promptHashes of those ids', async () => {
    for (const c of CHATS) {
      const expected = await reference.chat(c.messages, c.extra, c.tools);
      const got = await pre.run(chatTask(c.messages, c.extra, c.tools));
      expect([...got.tokenIds]).toEqual(expected);
      const h = promptHashes(Uint32Array.from(expected), 16);
      expect(got.hashes.local).toEqual(h.local);
      expect(got.hashes.seq).toEqual(h.seq);
      expect(got.approximate).toBe(false);
    }
  });

  it("text prompts get the tokenizer's special tokens as vLLM adds them; token-id prompts skip tokenization", async () => {
    const prompt = 'The quick brown fox <|im_end|> jumps over the lazy dog.';
    const got = await pre.run({ kind: 'text', model: 'demo', prompt, maxPromptTokens: 1000 });
    expect([...got.tokenIds]).toEqual(await reference.text(prompt));
    const ids = Uint32Array.from({ length: 40 }, (_, i) => 1000 + i);
    const tok = await pre.run({ kind: 'tokens', model: 'demo', tokenIds: ids, maxPromptTokens: 1000 });
    expect([...tok.tokenIds]).toEqual([...ids]);
    expect(tok.stats.tokenizeUs).toBe(0);
    expect(tok.hashes.local.length).toBe(2);
  });

  it('multi-turn conversations: the segment cache gives the uncached ids, and serves history from cache', async () => {
    const rng = mulberry32(42);
    const words = [
      'alpha',
      'beta',
      'gamma',
      ' delta',
      'naïve',
      '東京',
      '\n',
      '  ',
      'x-ray',
      '42',
      "it's",
      '!',
      'the',
      'résumé',
    ];
    const sentence = (n: number): string =>
      Array.from({ length: n }, () => words[Math.floor(rng() * words.length)]).join(rng() < 0.5 ? ' ' : '');
    const cached = await ModelPreprocessor.create(spec);
    const uncached = await ModelPreprocessor.create({ ...spec, segmentCacheTokens: 0 });
    expect(uncached.segmentCache).toBe(false);
    for (let conv = 0; conv < 4; conv++) {
      const messages: { role: string; content: string }[] = [{ role: 'system', content: sentence(20) }];
      for (let turn = 0; turn < 6; turn++) {
        messages.push({ role: 'user', content: sentence(5 + Math.floor(rng() * 60)) });
        const a = await cached.run(chatTask(messages));
        const b = await uncached.run(chatTask(messages));
        expect([...a.tokenIds]).toEqual([...b.tokenIds]);
        expect([...a.tokenIds]).toEqual(await reference.chat(messages));
        if (turn > 0) expect(a.stats.cachedTokens).toBeGreaterThan(0);
        messages.push({ role: 'assistant', content: sentence(10 + Math.floor(rng() * 40)) });
      }
    }
    expect(cached.cacheStats()!.hits).toBeGreaterThan(0);
  });

  it('the prompt limit, a model without tokenizer (approximate or reject), and template errors', async () => {
    const long = await pre.run(chatTask([{ role: 'user', content: 'hi' }])).then((r) => r.tokenIds.length);
    const err = await pre
      .run({ ...chatTask([{ role: 'user', content: 'hi' }]), maxPromptTokens: long - 1 })
      .catch((e: unknown) => e);
    expect(isKvgateError(err, 'KVG_ERR_PROMPT_TOO_LONG')).toBe(true);

    const approx = await ModelPreprocessor.create({ ...spec, tokenizer: { kind: 'none', onMissing: 'approximate' } });
    const a = await approx.run({
      kind: 'text',
      model: 'demo',
      prompt: 'hello world, hello world',
      maxPromptTokens: 100,
    });
    expect(a.approximate).toBe(true);
    expect([...a.tokenIds]).toEqual(fallbackEncode('hello world, hello world'));

    const reject = await ModelPreprocessor.create({ ...spec, tokenizer: { kind: 'none', onMissing: 'reject' } });
    const r = await reject
      .run({ kind: 'text', model: 'demo', prompt: 'x', maxPromptTokens: 100 })
      .catch((e: unknown) => e);
    expect(isKvgateError(r, 'KVG_ERR_TOKENIZER_UNAVAILABLE')).toBe(true);
    const t = await reject.run({
      kind: 'tokens',
      model: 'demo',
      tokenIds: Uint32Array.of(1, 2, 3),
      maxPromptTokens: 100,
    });
    expect(t.tokenIds.length).toBe(3);

    const bad = await pre
      .run(chatTask([{ role: 'user', content: [{ type: 'image_url' }] } as never]))
      .catch((e: unknown) => e);
    expect(isKvgateError(bad) && bad.statusCode).toBe(400);
  });
});

describe('segment tokenizer', () => {
  it('turns itself off for a tokenizer where splitting at the special tokens is not exact', async () => {
    // The byte-packing fallback tokenizer groups bytes across segment boundaries, so splitting changes its ids.
    const st = await SegmentTokenizer.create(fallbackTokenizer(), [{ content: '<|im_start|>', id: 7 }], {
      tokens: 10_000,
      bytes: 1 << 20,
    });
    expect(st.exact).toBe(false);
    const text = 'ab<|im_start|>cd';
    expect([...(await st.encode(text, false)).ids]).toEqual(fallbackEncode(text));
  });

  it('keeps at most its capacity of token ids (least recently used out)', async () => {
    const tok = loadTokenizer(files);
    const st = await SegmentTokenizer.create(tok, splitTokensOf(files.tokenizerJson), { tokens: 400, bytes: 1 << 20 });
    expect(st.exact).toBe(true);
    for (let i = 0; i < 50; i++)
      await st.encode(`<|im_start|>user\nmessage number ${i} with a few more words<|im_end|>\n`, false);
    const s = st.stats();
    expect(s.tokens).toBeLessThanOrEqual(400);
    expect(s.entries).toBeGreaterThan(10);
    // The most recent segment is still cached; the first one was evicted.
    const again = await st.encode('<|im_start|>user\nmessage number 49 with a few more words<|im_end|>\n', false);
    expect(again.cachedTokens).toBeGreaterThan(0);
    const first = await st.encode('<|im_start|>user\nmessage number 0 with a few more words<|im_end|>\n', false);
    expect(first.cachedTokens).toBe(1); // only the "\n" segment after <|im_end|>
  });
});

describe('preprocessing pool (runs dist/workers/preprocess.js: build first)', () => {
  let pool: Preprocessor;
  let inline: Preprocessor;
  beforeAll(async () => {
    // inlineMaxChars -1: every prompt goes through the worker threads, however small.
    [pool, inline] = await Promise.all([
      createPreprocessor([spec], { threads: 2, inlineMaxChars: -1 }),
      createPreprocessor([spec], { threads: 0 }),
    ]);
  });
  afterAll(async () => {
    await Promise.all([pool?.close(), inline?.close()]);
  });

  it('gives the same ids and hashes as the main thread, and keeps error codes across threads', async () => {
    expect(pool.mode).toBe('pool');
    expect(inline.mode).toBe('main-thread');
    const results = await Promise.all(CHATS.map((c) => pool.run(chatTask(c.messages, c.extra, c.tools))));
    for (let i = 0; i < CHATS.length; i++) {
      const direct = await inline.run(chatTask(CHATS[i]!.messages, CHATS[i]!.extra, CHATS[i]!.tools));
      expect(results[i]!.tokenIds).toEqual(direct.tokenIds);
      expect(results[i]!.hashes.local).toEqual(direct.hashes.local);
      expect(results[i]!.hashes.seq).toEqual(direct.hashes.seq);
      expect(results[i]!.tokenIds).toBeInstanceOf(Uint32Array);
      expect(results[i]!.hashes.local).toBeInstanceOf(BigUint64Array);
    }
    const ids = Uint32Array.from({ length: 33 }, (_, i) => i + 5);
    const tok = await pool
      .run({ kind: 'tokens', model: 'demo', tokenIds: ids, maxPromptTokens: 32 })
      .catch((e: unknown) => e);
    expect(isKvgateError(tok, 'KVG_ERR_PROMPT_TOO_LONG')).toBe(true);
    const unknown = await pool
      .run({ kind: 'text', model: 'nope', prompt: 'x', maxPromptTokens: 10 })
      .catch((e: unknown) => e);
    expect(isKvgateError(unknown, 'KVG_ERR_MODEL_NOT_FOUND')).toBe(true);
  });

  it('short prompts and token ids are sized for the main thread; long or tool-carrying ones for the pool', () => {
    expect(
      taskTextChars({ kind: 'tokens', model: 'demo', tokenIds: new Uint32Array(100_000), maxPromptTokens: 1e6 }),
    ).toBe(0);
    expect(taskTextChars({ kind: 'text', model: 'demo', prompt: 'x'.repeat(3000), maxPromptTokens: 1e6 })).toBe(3000);
    const chat = (content: unknown, tools?: unknown[]) => ({
      kind: 'chat' as const,
      model: 'demo',
      messages: [{ role: 'user', content }],
      tools,
      maxPromptTokens: 1e6,
    });
    expect(taskTextChars(chat('hello'))).toBe(5);
    expect(
      taskTextChars(
        chat([
          { type: 'text', text: 'hi' },
          { type: 'text', text: 'there' },
        ]),
      ),
    ).toBe(7);
    expect(taskTextChars(chat([{ type: 'image_url', image_url: { url: 'x' } }]))).toBe(Infinity);
    expect(taskTextChars(chat('hello', [{ type: 'function' }]))).toBe(Infinity);
    expect(taskTextChars(chat('y'.repeat(INLINE_MAX_CHARS + 1)))).toBeGreaterThan(INLINE_MAX_CHARS);
  });

  it('with the default split, results are the same as the main thread for short and long prompts', async () => {
    const hybrid = await createPreprocessor([spec], { threads: 1 });
    try {
      for (const content of ['short question?', 'a much longer message. '.repeat(200)]) {
        const task = chatTask([{ role: 'user', content }]);
        const [a, b] = [await hybrid.run(task), await inline.run(task)];
        expect(a.tokenIds).toEqual(b.tokenIds);
        expect(a.hashes.seq).toEqual(b.hashes.seq);
      }
    } finally {
      await hybrid.close();
    }
  });
});
