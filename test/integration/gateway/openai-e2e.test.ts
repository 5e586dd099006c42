/**
 * Issue 6, points 1 and 3, end to end: the official `openai` client against
 * `kvgate serve` (the embedded default: real routing, four mocker engines
 * with KV events, the bundled Qwen3 tokenizer and chat template).
 */
import OpenAI from 'openai';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEMO_MODEL } from '../../../src/cli/demo.js';
import { serve, type ServeHandle } from '../../../src/cli/serve.js';
import { loadTokenizer } from '../../../src/tokenizer/index.js';
import { until } from '../../helpers/until.js';

describe('the openai client through kvgate serve in front of mockers', () => {
  let h: ServeHandle;
  let url: string;
  let client: OpenAI;

  beforeAll(async () => {
    h = (await serve(['--port', '0', '--preprocess-threads', '1', '--log-level', 'silent'], {
      env: {},
      logger: pino({ level: 'silent' }),
      out: { write: () => undefined },
    }))!;
    url = `http://127.0.0.1:${h.gateway.addresses.public.port}`;
    client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'unused', maxRetries: 0 });
  });

  afterAll(async () => {
    await h?.stop();
  });

  it('chat and text completions, streaming and not, with usage', async () => {
    const chat = await client.chat.completions.create({
      model: DEMO_MODEL,
      messages: [{ role: 'user', content: 'Say hello.' }],
      max_tokens: 5,
    });
    expect(chat.choices[0]!.message.content!.length).toBeGreaterThan(0);
    expect(chat.usage).toMatchObject({ completion_tokens: 5 });
    const stream = await client.chat.completions.create({
      model: DEMO_MODEL,
      messages: [{ role: 'user', content: 'Count to three.' }],
      max_tokens: 6,
      stream: true,
      stream_options: { include_usage: true },
    });
    let text = '';
    let usage: OpenAI.CompletionUsage | undefined;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta?.content ?? '';
      if (chunk.usage) usage = chunk.usage;
    }
    expect(text.length).toBeGreaterThan(0);
    expect(usage?.completion_tokens).toBe(6);
    const completion = await client.completions.create({
      model: DEMO_MODEL,
      prompt: 'Once upon a time',
      max_tokens: 4,
    });
    expect(completion.choices[0]!.text.length).toBeGreaterThan(0);
    expect(completion.usage?.completion_tokens).toBe(4);
    const streamed = await client.completions.create({
      model: DEMO_MODEL,
      prompt: [1, 2, 3, 4, 5],
      max_tokens: 3,
      stream: true,
    });
    let n = 0;
    for await (const chunk of streamed) n += chunk.choices[0]?.text ? 1 : 0;
    expect(n).toBe(3);
  });

  it('a multi-turn conversation sticks to the worker holding its history', async () => {
    const messages: OpenAI.ChatCompletionMessageParam[] = [
      {
        role: 'system',
        content:
          'You are a meticulous assistant. Explain every step of your reasoning about distributed caches in detail.',
      },
      {
        role: 'user',
        content: 'What is a KV cache, and why does prefix reuse reduce time to first token in LLM serving?',
      },
    ];
    const workers: string[] = [];
    const cached: number[] = [];
    for (let turn = 0; turn < 4; turn++) {
      const { data, response } = await client.chat.completions
        .create({ model: DEMO_MODEL, messages, max_tokens: 12 })
        .withResponse();
      workers.push(response.headers.get('x-kvgate-worker')!);
      cached.push(data.usage?.prompt_tokens_details?.cached_tokens ?? 0);
      messages.push({ role: 'assistant', content: data.choices[0]!.message.content ?? '' });
      messages.push({ role: 'user', content: `Follow-up question number ${turn + 1}: go deeper.` });
      // The next turn can only stick once the engine's KV events reached the router.
      await waitForOverlap(url, messages);
    }
    expect(new Set(workers).size).toBe(1);
    expect(workers[0]).toMatch(/^[1-4]$/);
    for (const c of cached.slice(1)) expect(c).toBeGreaterThan(32);
  });

  it("token ids equal direct tokenization, and the router's block hashes match the engine's KV events", async () => {
    const tok = loadTokenizer('demo');
    const requests: OpenAI.ChatCompletionMessageParam[][] = [
      [{ role: 'user', content: 'Hi' }],
      [
        { role: 'system', content: 'Be brief.' },
        { role: 'user', content: 'Why is the sky blue? Explain Rayleigh scattering.' },
      ],
      [
        { role: 'user', content: 'Ünïcödé, emoji 🚀 and code: `const x = 1;`' },
        { role: 'assistant', content: 'Noted.' },
        { role: 'user', content: 'Again, but longer please, with many more words in the answer than before.' },
      ],
    ];
    for (const messages of requests) {
      const route = await postRoute(url, messages);
      const direct = await tok.encode(tok.renderChat(messages as never, { addGenerationPrompt: true }), {
        addSpecialTokens: false,
      });
      expect(route.token_ids).toEqual(direct);
      // Serve it; the engine stores the prompt's full blocks and publishes them as KV events with token ids.
      // The router re-hashes those tokens with its own chain: a full-depth match proves the hashes agree.
      await client.chat.completions.create({ model: DEMO_MODEL, messages, max_tokens: 2 });
      const fullBlocks = Math.floor(direct.length / route.block_size);
      await until(
        async () => (await postRoute(url, messages)).overlap_blocks === fullBlocks,
        'router overlap = every full block',
        10_000,
      );
    }
  });

  it('concurrent requests may reuse one x-request-id (clients and proxies resend them)', async () => {
    const send = () =>
      fetch(`${url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-request-id': 'same-id' },
        body: JSON.stringify({
          model: DEMO_MODEL,
          messages: [{ role: 'user', content: 'hi' }],
          max_tokens: 64,
          stream: true,
        }),
      });
    const responses = await Promise.all([send(), send(), send()]);
    expect(responses.map((r) => r.status)).toEqual([200, 200, 200]);
    for (const r of responses) {
      expect(r.headers.get('x-request-id')).toBe('same-id');
      expect(await r.text()).toContain('data: [DONE]');
    }
  });

  // issue 12 item 12: the response id is built from the client's request id, without kvgate's leg suffix.
  it("response ids carry the client's x-request-id as sent, streaming or not, chat or text", async () => {
    const post = (path: string, body: Record<string, unknown>) =>
      fetch(`${url}${path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-request-id': 'my-trace-123' },
        body: JSON.stringify({ model: DEMO_MODEL, max_tokens: 3, ...body }),
      });
    const chat = (await (
      await post('/v1/chat/completions', { messages: [{ role: 'user', content: 'hi' }] })
    ).json()) as { id: string };
    expect(chat.id).toBe('chatcmpl-my-trace-123');
    const text = (await (await post('/v1/completions', { prompt: 'hi' })).json()) as { id: string };
    expect(text.id).toBe('cmpl-my-trace-123');
    const sse = await (
      await post('/v1/chat/completions', { messages: [{ role: 'user', content: 'hi' }], stream: true })
    ).text();
    const ids = [...sse.matchAll(/"id":"([^"]*)"/g)].map((m) => m[1]);
    expect(ids.length).toBeGreaterThan(0);
    expect(new Set(ids)).toEqual(new Set(['chatcmpl-my-trace-123']));
  });
});

interface RouteBody {
  overlap_blocks: number;
  block_size: number;
  token_ids: number[];
  worker: { worker_id: number };
}

async function postRoute(url: string, messages: unknown): Promise<RouteBody> {
  const r = await fetch(`${url}/v1/route`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: DEMO_MODEL, messages }),
  });
  expect(r.status).toBe(200);
  return (await r.json()) as RouteBody;
}

/** Waits until the router sees the conversation's history (all but the new turn) cached somewhere. */
async function waitForOverlap(url: string, messages: unknown[]): Promise<void> {
  const history = messages.slice(0, -1);
  await until(async () => (await postRoute(url, history)).overlap_blocks > 0, 'history in the index', 10_000);
}
