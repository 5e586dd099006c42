/** The official `openai` npm client against a mocker running the demo model's real tokenizer and chat template. */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import { startMocker, type MockerHandle } from '../../src/mocker/index.js';
import { loadTokenizer } from '../../src/tokenizer/index.js';

let m: MockerHandle;
let client: OpenAI;

beforeAll(async () => {
  m = await startMocker({ model: 'Qwen/Qwen3-0.6B', tokenizer: 'demo', speedup: 50, kvEvents: false });
  client = new OpenAI({ baseURL: `${m.url}/v1`, apiKey: 'unused', maxRetries: 0 });
});
afterAll(async () => {
  await m.close();
});

describe('official openai client', () => {
  it('streams a chat completion', async () => {
    const messages = [
      {
        role: 'user' as const,
        content:
          'Tell me about KV caches, prefix reuse across requests, and why routing by cached prefix lowers the time to first token.',
      },
    ];
    const stream = await client.chat.completions.create({
      model: 'Qwen/Qwen3-0.6B',
      messages,
      max_tokens: 12,
      stream: true,
      stream_options: { include_usage: true },
    });
    let text = '';
    let finish: string | null = null;
    let usage: OpenAI.CompletionUsage | undefined;
    for await (const chunk of stream) {
      if (chunk.choices[0]) {
        text += chunk.choices[0].delta.content ?? '';
        finish = chunk.choices[0].finish_reason ?? finish;
      }
      if (chunk.usage) usage = chunk.usage;
    }
    expect(finish).toBe('length');
    expect(usage?.completion_tokens).toBe(12);
    // The prompt is the Qwen3 chat template rendered and tokenized exactly as the gateway would.
    const tok = loadTokenizer('demo');
    const expected = await tok.encode(tok.renderChat(messages), { addSpecialTokens: false });
    expect(usage?.prompt_tokens).toBe(expected.length);
    // Generated text is made of real vocabulary words, and re-tokenizes to 12 tokens or close.
    expect(text).toMatch(/^( ?[A-Za-z]{2,}){12}$/);

    // The same conversation again hits the prefix cache.
    const again = await client.chat.completions.create({ model: 'Qwen/Qwen3-0.6B', messages, max_tokens: 1 });
    expect(expected.length).toBeGreaterThan(17); // at least one full block is shared
    expect(
      (again.usage as { prompt_tokens_details?: { cached_tokens?: number } }).prompt_tokens_details?.cached_tokens,
    ).toBe(Math.floor((expected.length - 1) / 16) * 16);
  });

  it('lists models and surfaces 400s as BadRequestError', async () => {
    const models = await client.models.list();
    expect(models.data.map((x) => x.id)).toEqual(['Qwen/Qwen3-0.6B']);
    await expect(
      client.completions.create({ model: 'Qwen/Qwen3-0.6B', prompt: 'x', max_tokens: -1 }),
    ).rejects.toMatchObject({
      status: 400,
      error: { type: 'invalid_request_error', param: 'max_tokens' },
    });
  });
});
