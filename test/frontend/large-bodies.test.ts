/**
 * Issue 23, section 2: a body over the inline bound is parsed, checked and
 * preprocessed on a preprocessing thread, and only what routing reads comes
 * back. The same requests through a gateway that does everything on the main
 * thread and one that sends every body to its pool reach the router as the
 * same PreparedRequest (ids, hashes, hints, the engine's body), and bad ones
 * get the same errors in the same order; the offloading gateway's main thread
 * never parses a large body. Also `limits.max_messages` and `nvext.token_data`.
 */
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { loadGatewayConfig, type GatewayConfig } from '../../src/config/index.js';
import { serializeBody } from '../../src/engines/request-body.js';
import {
  GatewayServer,
  createPreprocessor,
  preprocessModelSpecs,
  type PreparedRequest,
  type Preprocessor,
} from '../../src/frontend/index.js';
import { KvgateMetrics } from '../../src/metrics/index.js';
import { loadTokenizer } from '../../src/tokenizer/index.js';
import { FakeRouter } from './fake-router.js';
import { PYTHON_TOOLS_PROMPT, TOOL_BODIES } from './python-prompts.js';
import { post } from './server-harness.js';

const MAX_MESSAGES = 64;

const config: GatewayConfig = loadGatewayConfig({
  base: {
    listen: { port: 0 },
    router: { use_kv_events: false },
    limits: { max_body_bytes: 4 * 1024 * 1024, max_prompt_tokens: 20_000, max_messages: MAX_MESSAGES },
    preprocess: { threads: 0 },
    log: { level: 'silent' },
    models: [
      {
        name: 'demo',
        tokenizer: 'demo',
        lora_adapters: ['sql'],
        workers: [
          { id: 1, url: 'http://127.0.0.1:1' },
          { id: 2, url: 'http://127.0.0.1:2' },
        ],
      },
      { name: 'approx', tokenizer: 'none', workers: [{ id: 21, url: 'http://127.0.0.1:21' }] },
    ],
  },
  env: {},
});

interface Gateway {
  url: string;
  server: GatewayServer;
  routers: { demo: FakeRouter; approx: FakeRouter };
  pre: Preprocessor;
}

async function gateway(threads: number): Promise<Gateway> {
  // With a pool, every body goes to it (-1): what the default does for bodies over 16 KB.
  const pre = await createPreprocessor(preprocessModelSpecs(config), {
    threads,
    inlineMaxBodyBytes: -1,
    inlineMaxChars: -1,
  });
  const routers = {
    demo: new FakeRouter({ model: 'demo', workerIds: [1, 2] }),
    approx: new FakeRouter({ model: 'approx', workerIds: [21] }),
  };
  const server = new GatewayServer({
    config,
    routers: Object.values(routers),
    preprocessor: pre,
    logger: pino({ level: 'silent' }),
    metrics: new KvgateMetrics({ processMetrics: false }),
  });
  const addr = await server.listen();
  return { url: `http://127.0.0.1:${addr.public.port}`, server, routers, pre };
}

let here: Gateway;
let pooled: Gateway;
beforeAll(async () => {
  [here, pooled] = await Promise.all([gateway(0), gateway(1)]);
}, 60_000);
afterAll(async () => {
  for (const g of [here, pooled]) {
    await g?.server.close({ drainTimeoutMs: 100 });
    await g?.pre.close();
  }
});

/** What the router receives, comparable across gateways: the engine's body as the engine gets it (as an object). */
function seen(req: PreparedRequest): Record<string, unknown> {
  return {
    endpoint: req.endpoint,
    model: req.model,
    stream: req.stream,
    queryOnly: req.queryOnly,
    approximate: req.approximate,
    tokenIds: [...req.tokenIds],
    blockHashes: [...req.hashes.local],
    sequenceHashes: [...req.hashes.seq],
    hints: req.hints,
    engineBody: JSON.parse(serializeBody(req.body, { stream: true, stream_options: { include_usage: true } })),
  };
}

/** A token-id prompt whose JSON is well past the 16 KiB from which a thread reads the ids from the body's bytes. */
const longIds = Array.from({ length: 6000 }, (_, i) => (i * 7919) % 30000);

const messages = (n: number, words = 3): { role: string; content: string }[] =>
  Array.from({ length: n }, (_, i) => ({
    role: i % 2 === 0 ? 'user' : 'assistant',
    content: `message ${i} ${'word '.repeat(words)}`,
  }));
const tools = Array.from({ length: 40 }, (_, i) => ({
  type: 'function',
  function: {
    name: `tool_${i}`,
    description: 'd '.repeat(50),
    parameters: {
      type: 'object',
      properties: { a: { type: 'string' }, b: { type: 'array', items: { type: 'integer' } } },
    },
  },
}));

describe('a body parsed on a preprocessing thread reaches the router as the same request', () => {
  const ok: { name: string; path: string; body: unknown; headers?: Record<string, string> }[] = [
    {
      name: 'a short chat',
      path: '/v1/chat/completions',
      body: { model: 'demo', messages: messages(1), stream: true },
    },
    {
      name: 'a long chat with tools',
      path: '/v1/chat/completions',
      body: { model: 'demo', messages: messages(MAX_MESSAGES, 200), tools, max_tokens: 9 },
    },
    {
      name: 'hints, a session header, an override, a LoRA adapter as model',
      path: '/v1/chat/completions',
      body: {
        model: 'sql',
        messages: messages(3),
        nvext: {
          allowed_worker_ids: [1, 2],
          agent_hints: { osl: 40, priority: 2 },
          router_config_override: { router_temperature: 0.5 },
        },
      },
      headers: { 'x-session-id': 'conversation-7', 'x-worker-instance-id': '2' },
    },
    {
      name: 'a text completion',
      path: '/v1/completions',
      body: { model: 'demo', prompt: 'once upon a time '.repeat(500), cache_salt: 'tenant-a' },
    },
    {
      name: 'a token-id completion',
      path: '/v1/completions',
      body: { model: 'demo', prompt: Array.from({ length: 5000 }, (_, i) => (i * 7) % 30000) },
    },
    {
      name: 'a completion with nvext.token_data (sent as its prompt)',
      path: '/v1/completions',
      body: {
        model: 'demo',
        prompt: 'hi',
        nvext: { token_data: Array.from({ length: 3000 }, (_, i) => 100 + i) },
        stream: false,
      },
    },
    { name: 'a query-only chat', path: '/v1/route', body: { model: 'demo', messages: messages(5) } },
    {
      name: 'a long token-id prompt, pretty-printed after a byte order mark (its ids read from the bytes)',
      path: '/v1/completions',
      body: `\uFEFF${JSON.stringify({ model: 'demo', prompt: longIds, max_tokens: 3, stream: true }, null, 2)}`,
    },
    {
      name: 'a long token-id prompt on /v1/route',
      path: '/v1/route',
      body: { model: 'demo', prompt: longIds, return_token_ids: false },
    },
    {
      name: 'a long token-id prompt with an id written 7.0 (parsed as JSON)',
      path: '/v1/completions',
      body: `{"model":"demo","prompt":[${longIds.join(',')},7.0]}`,
    },
    {
      name: 'a long token-id prompt given twice (the last one counts)',
      path: '/v1/completions',
      body: `{"model":"demo","prompt":${JSON.stringify(longIds)},"prompt":[5,6,7]}`,
    },
    {
      name: 'a long token-id prompt and nvext.token_data (the token data counts)',
      path: '/v1/completions',
      body: { model: 'demo', prompt: longIds, nvext: { token_data: longIds.slice(0, 100) } },
    },
    {
      name: 'a key given twice and a __proto__ member',
      path: '/v1/chat/completions',
      body: '{"model":"demo","max_tokens":1,"messages":[{"role":"user","content":"hi"}],"max_tokens":4,"__proto__":{"x":1}}',
    },
    {
      name: 'a model without tokenizer',
      path: '/v1/completions',
      body: { model: 'approx', prompt: 'héllo wörld '.repeat(300) },
    },
  ];
  for (const c of ok) {
    it(`${c.name}: ids, hashes, hints and the engine's body agree`, async () => {
      const results = await Promise.all(
        [here, pooled].map(async (g) => {
          const r = await post(`${g.url}${c.path}`, c.body, c.headers);
          const router =
            g.routers[
              (typeof c.body === 'string' ? 'demo' : (c.body as { model: string }).model) === 'approx'
                ? 'approx'
                : 'demo'
            ];
          return { status: r.status, req: c.path === '/v1/route' ? router.queried.at(-1)! : router.routed.at(-1)! };
        }),
      );
      expect(results.map((r) => r.status)).toEqual([200, 200]);
      expect(seen(results[1]!.req)).toEqual(seen(results[0]!.req));
    });
  }

  it("a completion's nvext.token_data is the prompt its engine gets; nvext never reaches an engine", async () => {
    const ids = Array.from({ length: 3000 }, (_, i) => 100 + i);
    for (const g of [here, pooled]) {
      expect(
        (await post(`${g.url}/v1/completions`, { model: 'demo', prompt: 'a short text', nvext: { token_data: ids } }))
          .status,
      ).toBe(200);
      const req = g.routers.demo.routed.at(-1)!;
      expect([...req.tokenIds]).toEqual(ids);
      const engineBody = JSON.parse(serializeBody(req.body)) as Record<string, unknown>;
      expect(engineBody.prompt).toEqual(ids);
      expect(engineBody.nvext).toBeUndefined();
    }
  });

  it("a chat's nvext.token_data must be its prompt's ids: equal ones route, others are refused", async () => {
    const body = { model: 'demo', messages: messages(4) };
    const route = await post(`${here.url}/v1/route`, body);
    const ids = route.json.token_ids as number[];
    for (const g of [here, pooled]) {
      const good = await post(`${g.url}/v1/chat/completions`, { ...body, nvext: { token_data: ids } });
      expect(good.status).toBe(200);
      expect([...g.routers.demo.routed.at(-1)!.tokenIds]).toEqual(ids);
      const longer = [...ids, ...Array.from({ length: 4000 }, () => 7)];
      const bad = await post(`${g.url}/v1/chat/completions`, { ...body, nvext: { token_data: longer } });
      expect(bad.status).toBe(400);
      expect(bad.json.error).toMatchObject({ code: 'KVG_ERR_TOKEN_DATA_MISMATCH', param: 'nvext.token_data' });
      expect(bad.json.error.message).toContain(`${longer.length} ids`);
      expect(bad.json.error.message).toContain(`differ from position ${ids.length}`);
      // Without the model's own tokenizer the ids cannot be checked.
      const approx = await post(`${g.url}/v1/chat/completions`, {
        model: 'approx',
        messages: messages(1),
        nvext: { token_data: [1, 2, 3] },
      });
      expect(approx.json.error).toMatchObject({ code: 'KVG_ERR_TOKENIZER_UNAVAILABLE', param: 'nvext.token_data' });
    }
  });
});

describe("/v1/route's token_ids", () => {
  it('are left out of the answer when the request says return_token_ids: false, on either thread', async () => {
    const body = { model: 'demo', messages: messages(40, 20) };
    for (const g of [here, pooled]) {
      const full = await post(`${g.url}/v1/route`, body);
      expect(full.status).toBe(200);
      const ids = full.json.token_ids as number[];
      expect(ids.length).toBe(full.json.prompt_tokens);
      expect((await post(`${g.url}/v1/route`, { ...body, return_token_ids: true })).json.token_ids).toEqual(ids);
      // null is vLLM's default (none asked): the ids as without the field.
      expect((await post(`${g.url}/v1/route`, { ...body, return_token_ids: null })).json.token_ids).toEqual(ids);
      const lean = await post(`${g.url}/v1/route`, { ...body, return_token_ids: false });
      expect(lean.status).toBe(200);
      expect(lean.json.token_ids).toBeUndefined();
      // Routed on the same prompt (the fake router's pick itself may differ between two queries).
      expect(lean.json).toMatchObject({
        prompt_tokens: full.json.prompt_tokens,
        prompt_blocks: full.json.prompt_blocks,
      });
      expect(g.routers.demo.queried.at(-1)!.hashes.seq).toEqual(g.routers.demo.queried.at(-2)!.hashes.seq);
      const bad = await post(`${g.url}/v1/route`, { ...body, return_token_ids: 'no' });
      expect(bad.status).toBe(400);
      expect(bad.json.error).toMatchObject({ code: 'KVG_ERR_INVALID_REQUEST' });
      expect(bad.json.error.message).toContain('return_token_ids');
    }
  });
});

describe('bad bodies get the same answers on either thread', () => {
  const bad: { name: string; body: unknown; status: number; code: string; param?: string; path?: string }[] = [
    {
      name: 'not UTF-8',
      body: Buffer.from([0x7b, 0x22, 0xff, 0xfe, 0x22, 0x3a, 0x31, 0x7d]),
      status: 400,
      code: 'KVG_ERR_INVALID_JSON',
    },
    { name: 'invalid JSON', body: '{"model": "demo", "messages": [', status: 400, code: 'KVG_ERR_INVALID_JSON' },
    {
      name: 'nested too deep',
      body: `{"model":"demo","messages":[],"x":${'['.repeat(200)}${']'.repeat(200)}}`,
      status: 400,
      code: 'KVG_ERR_INVALID_REQUEST',
    },
    {
      name: 'more messages than limits.max_messages',
      body: { model: 'demo', messages: messages(MAX_MESSAGES + 1) },
      status: 400,
      code: 'KVG_ERR_TOO_MANY_MESSAGES',
      param: 'messages',
    },
    {
      name: 'more than 1,024 members',
      body: Object.fromEntries([
        ['model', 'demo'],
        ['messages', messages(1)],
        ...Array.from({ length: 1030 }, (_, i) => [`k${i}`, i]),
      ]),
      status: 400,
      code: 'KVG_ERR_INVALID_REQUEST',
    },
    {
      name: 'a schema violation',
      body: { model: 'demo', messages: [{ role: 'user', content: 42 }] },
      status: 400,
      code: 'KVG_ERR_INVALID_REQUEST',
      param: 'messages[0].content',
    },
    {
      name: 'an unknown model',
      body: { model: 'gpt-9', messages: messages(1) },
      status: 404,
      code: 'KVG_ERR_MODEL_NOT_FOUND',
      param: 'model',
    },
    {
      name: 'an unknown pinned worker',
      body: { model: 'demo', messages: messages(1), nvext: { backend_instance_id: 9 } },
      status: 400,
      code: 'KVG_ERR_UNKNOWN_WORKER',
    },
    {
      name: 'a prompt over the limit',
      body: { model: 'demo', messages: [{ role: 'user', content: 'word '.repeat(30_000) }] },
      status: 400,
      code: 'KVG_ERR_PROMPT_TOO_LONG',
    },
    {
      name: 'an image part',
      body: { model: 'demo', messages: [{ role: 'user', content: [{ type: 'image_url' }] }] },
      status: 400,
      code: 'KVG_ERR_UNSUPPORTED_CONTENT',
    },
    {
      name: 'a long token-id prompt with an id past 2^32 - 1',
      path: '/v1/completions',
      body: { model: 'demo', prompt: [...longIds, 4294967296] },
      status: 400,
      code: 'KVG_ERR_INVALID_REQUEST',
      param: 'prompt',
    },
    {
      name: 'a long token-id prompt with a negative id',
      path: '/v1/completions',
      body: { model: 'demo', prompt: [-1, ...longIds] },
      status: 400,
      code: 'KVG_ERR_INVALID_REQUEST',
      param: 'prompt',
    },
    {
      name: 'invalid JSON after a long token-id prompt',
      path: '/v1/completions',
      body: `{"model":"demo","prompt":${JSON.stringify(longIds)},"max_tokens":}`,
      status: 400,
      code: 'KVG_ERR_INVALID_JSON',
    },
    {
      name: 'a long token-id prompt in a body that is not UTF-8',
      path: '/v1/completions',
      body: Buffer.from(`{"model":"demo","prompt":${JSON.stringify(longIds)},"user":"\xff"}`, 'latin1'),
      status: 400,
      code: 'KVG_ERR_INVALID_JSON',
    },
    {
      name: 'a batch prompt',
      path: '/v1/completions',
      body: { model: 'demo', prompt: ['a', 'b'] },
      status: 400,
      code: 'KVG_ERR_UNSUPPORTED_CONTENT',
      param: 'prompt',
    },
  ];
  for (const c of bad) {
    it(`${c.name}: ${c.status} ${c.code}`, async () => {
      for (const g of [here, pooled]) {
        const r = await (c.body instanceof Buffer
          ? fetch(`${g.url}${c.path ?? '/v1/chat/completions'}`, {
              method: 'POST',
              headers: { 'content-type': 'application/json' },
              body: c.body,
            }).then(async (x) => ({ status: x.status, json: (await x.json()) as any }))
          : post(`${g.url}${c.path ?? '/v1/chat/completions'}`, c.body));
        expect(r.status, `${c.name} (threads ${g.pre.threads})`).toBe(c.status);
        expect(r.json.error.code, `${c.name} (threads ${g.pre.threads})`).toBe(c.code);
        if (c.param !== undefined) expect(r.json.error.param).toBe(c.param);
      }
    });
  }

  it('the limit is in the message of KVG_ERR_TOO_MANY_MESSAGES', async () => {
    const r = await post(`${pooled.url}/v1/chat/completions`, { model: 'demo', messages: messages(MAX_MESSAGES + 5) });
    expect(r.json.error.message).toBe(
      `messages holds ${MAX_MESSAGES + 5} messages; kvgate accepts at most ${MAX_MESSAGES} per request`,
    );
  });

  it('a model without a worker is a 503 before any error about the prompt, on either thread', async () => {
    for (const g of [here, pooled]) {
      g.routers.demo.servable = false;
      try {
        const r = await post(`${g.url}/v1/chat/completions`, {
          model: 'demo',
          messages: [{ role: 'user', content: 'word '.repeat(30_000) }],
        });
        expect(r.status).toBe(503);
        expect(r.json.error.code).toBe('KVG_ERR_MODEL_UNAVAILABLE');
      } finally {
        g.routers.demo.servable = true;
      }
    }
  });
});

describe("the offloading gateway's main thread", () => {
  it('never parses a large body, nor serialises it to send it on', async () => {
    const parse = vi.spyOn(JSON, 'parse');
    const stringify = vi.spyOn(JSON, 'stringify');
    try {
      const body = JSON.stringify({ model: 'demo', messages: messages(MAX_MESSAGES, 200), tools, stream: true });
      expect(body.length).toBeGreaterThan(50_000);
      const r = await fetch(`${pooled.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body,
      });
      expect(r.status).toBe(200);
      await r.text();
      const sent = serializeBody(pooled.routers.demo.routed.at(-1)!.body, {
        stream: true,
        stream_options: { include_usage: true },
      });
      expect(sent.length).toBeGreaterThan(50_000);
      const long = (s: unknown): boolean => typeof s === 'string' && s.length > 10_000;
      expect(parse.mock.calls.filter(([text]) => long(text)).length).toBe(0);
      // Nothing long was serialised (the test's own JSON.stringify of the body and serializeBody above excepted).
      expect(stringify.mock.results.slice(1).filter((r) => long(r.value)).length).toBe(0);
    } finally {
      parse.mockRestore();
      stringify.mockRestore();
    }
  });
});

describe('a long token-id prompt read from the bytes', () => {
  it('is refused with the same error object on either thread, message included', async () => {
    const ids = JSON.stringify(longIds);
    const bodies = [
      `{"model":"demo","prompt":${ids},"max_tokens":}`,
      `{"model":"demo","prompt":${ids},"max_tokens":"many"}`,
      `{"model":"demo","prompt":${ids.slice(0, -1)},4294967296]}`,
      `{"model":"gpt-9","prompt":${ids}}`,
      `{"model":"demo","prompt":${ids},"nvext":{"backend_instance_id":9}}`,
    ];
    for (const body of bodies) {
      const [a, b] = await Promise.all([here, pooled].map((g) => post(`${g.url}/v1/completions`, body)));
      expect(b!.status, body.slice(-60)).toBe(a!.status);
      expect(b!.json, body.slice(-60)).toEqual(a!.json);
    }
  });
});

describe("a Messages tool_use input's numbers, on either thread", () => {
  it('route on the prompt vLLM renders (1.0 stays 1.0, 1e-7 is 1e-07, a 20-digit integer stays exact)', async () => {
    const body =
      '{"model": "demo", "max_tokens": 8, "messages": [{"role": "user", "content": "Scale it"}, {"role": "assistant", ' +
      '"content": [{"type": "tool_use", "id": "t1", "name": "scale", "input": {"factor": 1.0, ' +
      '"id": 12345678901234567890, "tiny": 1e-7}}]}, {"role": "user", "content": [{"type": "tool_result", ' +
      '"tool_use_id": "t1", "content": "done"}]}]}';
    // What Python rendered for this body (jinja2, the transformers tojson, the demo model's Qwen3 template).
    const python =
      '<|im_start|>user\nScale it<|im_end|>\n<|im_start|>assistant\n<tool_call>\n{"name": "scale", "arguments": ' +
      '{"factor": 1.0, "id": 12345678901234567890, "tiny": 1e-07}}\n</tool_call><|im_end|>\n<|im_start|>user\n' +
      '<tool_response>\ndone\n</tool_response><|im_end|>\n<|im_start|>assistant\n';
    const ids = await loadTokenizer('demo').encode(python, { addSpecialTokens: false });
    for (const g of [here, pooled]) {
      const r = await post(`${g.url}/v1/messages`, body);
      expect(r.status).toBe(200);
      expect([...g.routers.demo.routed.at(-1)!.tokenIds]).toEqual(ids);
    }
  });
});

describe("a tool schema's numbers, on either thread", () => {
  it('route on the prompt vLLM renders (0.0 and 1.0 stay so, 1e-7 is 1e-07), Messages and Chat Completions', async () => {
    const ids = await loadTokenizer('demo').encode(PYTHON_TOOLS_PROMPT, { addSpecialTokens: false });
    for (const [endpoint, path] of [
      ['messages', '/v1/messages'],
      ['chat', '/v1/chat/completions'],
    ] as const) {
      for (const g of [here, pooled]) {
        const r = await post(`${g.url}${path}`, TOOL_BODIES[endpoint]);
        expect(r.status).toBe(200);
        expect([...g.routers.demo.routed.at(-1)!.tokenIds]).toEqual(ids);
      }
    }
  });
});

describe('what a preprocessing thread sends back for a large body', () => {
  it("is bounded by what routing reads: the client's bytes come back moved, not its text", async () => {
    const text = JSON.stringify({ model: 'demo', messages: messages(MAX_MESSAGES, 200), stream: true });
    const bytes = Buffer.from(text);
    // Its own buffer, as a body of many chunks is: moved to the thread, not copied.
    const own = new Uint8Array(new ArrayBuffer(bytes.length));
    own.set(bytes);
    const out = await pooled.pre.runBody({
      kind: 'body',
      endpoint: 'chat',
      bytes: own,
      maxMessages: MAX_MESSAGES,
      headers: {},
      models: [
        {
          name: 'demo',
          loraAdapters: [],
          adapters: [],
          maxPromptTokens: 20_000,
          anthropicInlineSystem: 'preserve',
          workers: [{ id: 1 }],
        },
      ],
    });
    expect(own.byteLength).toBe(0);
    expect(Buffer.from(out.forward.bytes!).equals(bytes)).toBe(true);
    const { bytes: _moved, ...rest } = out.forward;
    expect(JSON.stringify(rest).length).toBeLessThan(text.length / 20);
    expect(JSON.stringify(rest)).not.toContain('message 1 word');
  });
});
