/**
 * The mocker's OpenAI-compatible HTTP API over real sockets: completions and
 * chat (streaming and not), cached_tokens, determinism, /v1/models, /metrics,
 * /tokenize, and OpenAI-style 400s that leave the engine serving (a request over
 * the context, answered in each engine's words: context-refusal.test.ts).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startMocker, type MockerHandle } from '../../src/mocker/index.js';
import { createServer, type AddressInfo, type Server } from 'node:net';
import { postJson, readSse, until } from './helpers.js';

let m: MockerHandle;

beforeAll(async () => {
  m = await startMocker({ speedup: 50, maxModelLen: 256, engineHashSeed: 1n, kvEvents: false });
});
afterAll(async () => {
  await m.close();
});

const ids = (n: number, base: number): number[] => Array.from({ length: n }, (_, i) => base + i);

describe('completions and chat', () => {
  it('a repeated token prompt reports cached_tokens = the shared full-block prefix', async () => {
    const prompt = ids(100, 5000);
    const a = await postJson(`${m.url}/v1/completions`, { model: 'mock-model', prompt, max_tokens: 3 });
    expect(a.status).toBe(200);
    expect(a.json.usage).toEqual({
      prompt_tokens: 100,
      total_tokens: 103,
      completion_tokens: 3,
      prompt_tokens_details: { cached_tokens: 0 },
    });
    const b = await postJson(`${m.url}/v1/completions`, { prompt, max_tokens: 3 });
    expect(b.json.usage.prompt_tokens_details.cached_tokens).toBe(96);
    // A prompt sharing 40 tokens shares 2 full blocks (32 tokens).
    const c = await postJson(`${m.url}/v1/completions`, {
      prompt: [...prompt.slice(0, 40), ...ids(30, 9000)],
      max_tokens: 3,
    });
    expect(c.json.usage.prompt_tokens_details.cached_tokens).toBe(32);
    expect(a.json.object).toBe('text_completion');
    expect(a.json.choices[0]).toMatchObject({ index: 0, finish_reason: 'length', logprobs: null });
    expect(a.json.id).toMatch(/^cmpl-/);
  });

  it('streams completions as vLLM does, with usage at the end', async () => {
    const res = await fetch(`${m.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-request-id': 'req-42' },
      body: JSON.stringify({
        prompt: 'The quick brown fox',
        max_tokens: 4,
        stream: true,
        stream_options: { include_usage: true },
      }),
    });
    expect(res.headers.get('content-type')).toMatch(/^text\/event-stream/);
    const events = await readSse(res);
    expect(events.at(-1)).toBe('[DONE]');
    const chunks = events.slice(0, -1).map((e) => JSON.parse(e));
    expect(chunks).toHaveLength(5);
    expect(chunks.slice(0, 4).map((c) => c.choices[0].finish_reason)).toEqual([null, null, null, 'length']);
    expect(chunks[0]).toMatchObject({ id: 'cmpl-req-42', object: 'text_completion', model: 'mock-model' });
    expect(chunks[4].choices).toEqual([]);
    expect(chunks[4].usage.completion_tokens).toBe(4);
    expect(chunks[4].usage.prompt_tokens).toBe(7); // 19 bytes, 3 per token (fallback tokenizer)
  });

  it('streams chat: role first, content deltas, finish, usage, [DONE]', async () => {
    const res = await fetch(`${m.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        messages: [{ role: 'user', content: 'Hello' }],
        max_completion_tokens: 2,
        stream: true,
        stream_options: { include_usage: true, continuous_usage_stats: true },
      }),
    });
    const events = await readSse(res);
    const chunks = events.slice(0, -1).map((e) => JSON.parse(e));
    expect(chunks[0].choices[0].delta).toEqual({ role: 'assistant', content: '' });
    expect(chunks[1].choices[0].delta.content).toMatch(/^ [a-z]{2}$/);
    expect(chunks[2].choices[0]).toMatchObject({ finish_reason: 'length', stop_reason: null });
    expect(chunks[2].usage.completion_tokens).toBe(2);
    expect(chunks.at(-1).choices).toEqual([]);
    expect(chunks.every((c) => c.object === 'chat.completion.chunk' && c.id.startsWith('chatcmpl-'))).toBe(true);
  });

  it("non-streaming chat has vLLM's shape", async () => {
    const r = await postJson(`${m.url}/v1/chat/completions`, {
      messages: [
        { role: 'system', content: 'x' },
        { role: 'user', content: [{ type: 'text', text: 'hi' }] },
      ],
      max_tokens: 3,
    });
    expect(r.status).toBe(200);
    expect(r.json).toMatchObject({
      object: 'chat.completion',
      kv_transfer_params: null,
      usage: { completion_tokens: 3 },
    });
    expect(r.json.choices[0].message.role).toBe('assistant');
    expect(r.json.choices[0].message.content.split(' ').filter(Boolean)).toHaveLength(3);
  });

  it('generated tokens are deterministic for a seed', async () => {
    const body = { prompt: ids(20, 100), max_tokens: 8 };
    const t = async (seed?: number): Promise<string> =>
      (await postJson(`${m.url}/v1/completions`, seed === undefined ? body : { ...body, seed })).json.choices[0].text;
    expect(await t(7)).toBe(await t(7));
    expect(await t(7)).not.toBe(await t(8));
    expect(await t()).toBe(await t()); // no seed: derived from the engine seed and the prompt
  });

  it('tokenizes like the engine does', async () => {
    const r = await postJson(`${m.url}/tokenize`, { prompt: 'abcdef' });
    expect(r.json).toEqual({ count: 2, max_model_len: 256, tokens: [0x636261, 0x666564], token_strs: null });
    const d = await postJson(`${m.url}/detokenize`, { tokens: r.json.tokens });
    expect(d.json.prompt).toBe('abcdef');
  });

  it('a client that disconnects mid-stream aborts its request', async () => {
    const ac = new AbortController();
    const res = await fetch(`${m.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      signal: ac.signal,
      body: JSON.stringify({ prompt: ids(10, 7000), max_tokens: 200, stream: true }),
    });
    const reader = res.body!.getReader();
    await reader.read(); // first chunk arrived: the request is running
    ac.abort();
    await until(
      () => m.stats().ranks[0]!.running === 0 && m.stats().ranks[0]!.waiting === 0,
      'the aborted request to leave the engine',
    );
    expect(m.stats().ranks[0]!.activeBlocks).toBe(0);
  });
});

describe('models, health, metrics', () => {
  it('lists the model with its context length', async () => {
    const r = await fetch(`${m.url}/v1/models`);
    const j = (await r.json()) as { object: string; data: { id: string; max_model_len: number }[] };
    expect(j.object).toBe('list');
    expect(j.data[0]).toMatchObject({ id: 'mock-model', object: 'model', max_model_len: 256, owned_by: 'vllm' });
    expect((await fetch(`${m.url}/health`)).status).toBe(200);
  });

  it('exposes vLLM metric names', async () => {
    await postJson(`${m.url}/v1/completions`, { prompt: ids(40, 123), max_tokens: 2 });
    const text = await (await fetch(`${m.url}/metrics`)).text();
    for (const name of [
      'vllm:num_requests_running',
      'vllm:num_requests_waiting',
      'vllm:kv_cache_usage_perc',
      'vllm:prefix_cache_queries_total',
      'vllm:prefix_cache_hits_total',
      'vllm:time_to_first_token_seconds_bucket',
    ]) {
      expect(text).toContain(`${name}{`);
    }
    expect(text).toMatch(/vllm:prefix_cache_hits_total\{model_name="mock-model",engine="0"\} [1-9]/);
    expect(text).toMatch(/vllm:time_to_first_token_seconds_count\{model_name="mock-model",engine="0"\} [1-9]/);
    expect(text).toContain('kvgate_mocker_timing_model_info{model="polynomial",source="dynamo-mocker",speedup="50"} 1');
    expect(text).toContain('vllm:cache_config_info{block_size="16",num_gpu_blocks="16384"');
  });
});

describe('bad input gets OpenAI-style errors and the engine keeps serving', () => {
  const cases: [string, string, unknown, number, string | null][] = [
    ['malformed JSON', '/v1/completions', '{"prompt": "x", ', 400, null],
    ['missing messages', '/v1/chat/completions', { model: 'mock-model' }, 400, 'messages'],
    ['empty messages', '/v1/chat/completions', { messages: [] }, 400, 'messages'],
    ['negative max_tokens', '/v1/completions', { prompt: 'hi', max_tokens: -1 }, 400, 'max_tokens'],
    ['prompt of the wrong type', '/v1/completions', { prompt: { text: 'x' } }, 400, 'prompt'],
    [
      'non-text content part',
      '/v1/chat/completions',
      { messages: [{ role: 'user', content: [{ type: 'image_url' }] }] },
      400,
      'messages',
    ],
    ['n > 1', '/v1/completions', { prompt: 'x', n: 2 }, 400, 'n'],
    [
      'stream_options without stream',
      '/v1/completions',
      { prompt: 'x', stream_options: { include_usage: true } },
      400,
      'stream_options',
    ],
    ['unknown model', '/v1/completions', { model: 'gpt-4', prompt: 'x' }, 404, 'model'],
    ['logprobs over 20', '/v1/completions', { prompt: 'x', logprobs: 21 }, 400, 'logprobs'],
    ['a priority that is not an integer', '/v1/completions', { prompt: 'x', priority: 0.5 }, 400, 'priority'],
    ['a priority other than 0 under fcfs (as vLLM)', '/v1/completions', { prompt: 'x', priority: 2 }, 400, 'priority'],
    [
      'top_logprobs without logprobs',
      '/v1/chat/completions',
      { messages: [{ role: 'user', content: 'hi' }], top_logprobs: 2 },
      400,
      'top_logprobs',
    ],
    [
      'a tool without a name',
      '/v1/chat/completions',
      { messages: [{ role: 'user', content: 'hi' }], tools: [{ type: 'function', function: {} }] },
      400,
      'tools',
    ],
    [
      'tool_choice naming an unknown tool',
      '/v1/chat/completions',
      {
        messages: [{ role: 'user', content: 'hi' }],
        tools: [{ type: 'function', function: { name: 'a' } }],
        tool_choice: { type: 'function', function: { name: 'b' } },
      },
      400,
      'tool_choice',
    ],
  ];
  for (const [name, path, body, status, param] of cases) {
    it(name, async () => {
      const r = await postJson(`${m.url}${path}`, body);
      expect(r.status).toBe(status);
      expect(r.json.error).toMatchObject({ type: 'invalid_request_error', param });
      expect(typeof r.json.error.message).toBe('string');
      expect(r.json.error.code).toMatch(/^KVG_ERR_/);
      const ok = await postJson(`${m.url}/v1/completions`, { prompt: 'still serving', max_tokens: 1 });
      expect(ok.status).toBe(200);
    });
  }

  it("takes any integer priority under vLLM's priority policy", async () => {
    const prio = await startMocker({ schedulingPolicy: 'priority', kvEvents: false });
    try {
      for (const priority of [-3, 0, 7]) {
        const r = await postJson(`${prio.url}/v1/completions`, { prompt: 'x', max_tokens: 1, priority });
        expect(r.status).toBe(200);
      }
    } finally {
      await prio.close();
    }
  });

  it('takes a priority under priority eviction alone (SGLang reads it for eviction whatever its scheduling)', async () => {
    const evicting = await startMocker({ evictionPolicy: 'priority', kvEvents: false });
    try {
      const r = await postJson(`${evicting.url}/v1/completions`, { prompt: 'x', max_tokens: 1, priority: 4 });
      expect(r.status).toBe(200);
    } finally {
      await evicting.close();
    }
  });

  it('a request that can never fit in the KV cache is a 400', async () => {
    const small = await startMocker({ numGpuBlocks: 4, kvEvents: false });
    try {
      const r = await postJson(`${small.url}/v1/completions`, { prompt: ids(100, 1), max_tokens: 1 });
      expect(r.status).toBe(400);
      expect(r.json.error).toMatchObject({ code: 'KVG_ERR_INVALID_REQUEST', param: 'prompt' });
      expect(r.json.error.message).toMatch(/needs 7 KV blocks .* the engine has 4/);
      expect((await postJson(`${small.url}/v1/completions`, { prompt: ids(60, 1), max_tokens: 5 })).status).toBe(200);
    } finally {
      await small.close();
    }
  });

  it('unknown routes are 404, wrong methods 405', async () => {
    expect((await fetch(`${m.url}/v2/nothing`)).status).toBe(404);
    expect((await fetch(`${m.url}/v1/completions`)).status).toBe(405);
  });
});

/** Listens on 127.0.0.1:`port` (0: one the OS picks); resolves with the server, or undefined when the port is taken. */
function tryListen(port: number): Promise<Server | undefined> {
  return new Promise((resolve) => {
    const s = createServer();
    s.once('error', () => resolve(undefined));
    s.listen(port, '127.0.0.1', () => resolve(s));
  });
}

/**
 * A mocker of `dpSize` ranks publishing on consecutive ports from a base the OS offered. Other test files bind
 * ports the OS picks in parallel, so a port of the run can be taken between the probe and the mocker's bind: the
 * probe holds the whole run while it looks, and a bind refused as in use (the mocker closes what it opened) is
 * tried again from another base.
 */
async function mockerOnConsecutivePorts(dpSize: number): Promise<{ dp: MockerHandle; base: number }> {
  for (let attempt = 1; ; attempt++) {
    const first = (await tryListen(0))!;
    const base = (first.address() as AddressInfo).port;
    const rest = await Promise.all(Array.from({ length: dpSize - 1 }, (_, i) => tryListen(base + 1 + i)));
    await Promise.all([first, ...rest].map((s) => s && new Promise((r) => s.close(r))));
    if (rest.some((s) => s === undefined)) {
      if (attempt >= 50) throw new Error(`no run of ${dpSize} free ports in ${attempt} tries`);
      continue;
    }
    try {
      return { dp: await startMocker({ dpSize, kvEventsPort: base, kvEventsReplayPort: 0 }), base };
    } catch (err) {
      if (attempt >= 10 || !/in use/i.test(String(err))) throw err;
    }
  }
}

describe('data-parallel ranks behind one port', () => {
  it('balances to the least-loaded rank, honours an explicit rank, rejects a missing one', async () => {
    const dp = await startMocker({ dpSize: 2, speedup: 50, kvEvents: false });
    try {
      const res = await fetch(`${dp.url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ prompt: ids(8, 1), max_tokens: 500, stream: true }),
      });
      const reader = res.body!.getReader();
      await reader.read(); // running on rank 0
      await postJson(`${dp.url}/v1/completions`, { prompt: ids(8, 100), max_tokens: 1 });
      expect(dp.stats().ranks.map((r) => r.promptTokens)).toEqual([8, 8]); // the second went to the idle rank 1
      await reader.cancel();
      await postJson(
        `${dp.url}/v1/completions`,
        { prompt: ids(5, 200), max_tokens: 1 },
        { 'x-data-parallel-rank': '1' },
      );
      await postJson(`${dp.url}/v1/completions`, { prompt: ids(6, 300), max_tokens: 1, data_parallel_rank: 1 });
      expect(dp.stats().ranks[1]!.promptTokens).toBe(19);
      const bad = await postJson(`${dp.url}/v1/completions`, {
        prompt: ids(5, 1),
        max_tokens: 1,
        data_parallel_rank: 2,
      });
      expect(bad.status).toBe(400);
      expect(bad.json.error.code).toBe('KVG_ERR_INVALID_DP_RANK');
    } finally {
      await dp.close();
    }
  });

  it('rank r publishes KV events on the base port + r', async () => {
    const { dp, base } = await mockerOnConsecutivePorts(3);
    try {
      expect(dp.kvEventsPorts).toEqual([base, base + 1, base + 2]);
      expect(dp.kvEventsEndpoints[2]).toBe(`tcp://127.0.0.1:${base + 2}`);
      expect(dp.replayPorts).toHaveLength(3);
    } finally {
      await dp.close();
    }
  });
});
