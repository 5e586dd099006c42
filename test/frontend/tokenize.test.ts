/**
 * `POST /tokenize`, `POST /detokenize` and `POST /v1/messages/count_tokens` by the completions' rule: a body the
 * preprocessor offloads (over 16 KiB with a pool) is parsed, checked and tokenized on a pool thread, never on the
 * main thread, with the same answers and the same errors as a gateway that does everything on the main thread; a
 * large body costs the event loop what a completion's of the same size does. (Their answers against an engine's:
 * test/integration/gateway/tokenize.test.ts.)
 */
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { loadGatewayConfig, type GatewayConfig } from '../../src/config/index.js';
import {
  GatewayServer,
  createPreprocessor,
  preprocessModelSpecs,
  type Preprocessor,
} from '../../src/frontend/index.js';
import { KvgateMetrics } from '../../src/metrics/index.js';
import { FakeRouter } from './fake-router.js';
import { post } from './server-harness.js';

const config: GatewayConfig = loadGatewayConfig({
  base: {
    listen: { port: 0 },
    router: { use_kv_events: false },
    limits: { max_body_bytes: 4 * 1024 * 1024, max_prompt_tokens: 2000, max_messages: 8 },
    log: { level: 'silent' },
    models: [
      { name: 'demo', tokenizer: 'demo', lora_adapters: ['sql'], workers: [{ id: 1, url: 'http://127.0.0.1:1' }] },
      { name: 'approx', tokenizer: 'none', workers: [{ id: 21, url: 'http://127.0.0.1:21' }] },
    ],
  },
  env: {},
});

interface Gateway {
  url: string;
  server: GatewayServer;
  pre: Preprocessor;
}

/** `threads` 0: everything on the main thread; else a pool with its default bounds (bodies over 16 KiB to it). */
async function gateway(threads: number): Promise<Gateway> {
  const pre = await createPreprocessor(preprocessModelSpecs(config), { threads });
  const server = new GatewayServer({
    config,
    routers: [new FakeRouter({ model: 'demo', workerIds: [1] }), new FakeRouter({ model: 'approx', workerIds: [21] })],
    preprocessor: pre,
    logger: pino({ level: 'silent' }),
    metrics: new KvgateMetrics({ processMetrics: false }),
  });
  const addr = await server.listen();
  return { url: `http://127.0.0.1:${addr.public.port}`, server, pre };
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

/** A member no endpoint reads, making a body large enough to be offloaded. */
const PAD = { pad: 'p'.repeat(20_000) };
const chat = [
  { role: 'system', content: 'You are terse.' },
  { role: 'user', content: 'Count the words in this sentence, please.' },
];

const cases: { name: string; path: string; body: Record<string, unknown> }[] = [
  { name: 'a prompt', path: '/tokenize', body: { model: 'demo', prompt: 'Hello there, world' } },
  { name: 'a chat', path: '/tokenize', body: { model: 'demo', messages: chat, add_generation_prompt: true } },
  { name: 'an adapter', path: '/tokenize', body: { model: 'sql', prompt: 'select 1' } },
  { name: 'ids back to text', path: '/detokenize', body: { model: 'demo', tokens: [9707, 1052, 11, 1879] } },
  {
    name: 'a Messages request',
    path: '/v1/messages/count_tokens',
    body: { model: 'demo', system: 'be brief', messages: [{ role: 'user', content: 'How many tokens?' }] },
  },
  { name: 'no model while two are served', path: '/tokenize', body: { prompt: 'hi' } },
  { name: 'an unknown model', path: '/tokenize', body: { model: 'nope', prompt: 'hi' } },
  { name: 'a model without its tokenizer', path: '/tokenize', body: { model: 'approx', prompt: 'hi' } },
  { name: 'no prompt', path: '/tokenize', body: { model: 'demo' } },
  {
    name: 'token strings asked for',
    path: '/tokenize',
    body: { model: 'demo', prompt: 'hi', return_token_strs: true },
  },
  { name: 'too many messages', path: '/tokenize', body: { model: 'demo', messages: Array(9).fill(chat[1]) } },
  { name: 'a bad id', path: '/detokenize', body: { model: 'demo', tokens: [1, -2] } },
  { name: 'a count without model', path: '/v1/messages/count_tokens', body: { messages: chat.slice(1) } },
];

describe('the tokenizer endpoints give the same answers on either thread', () => {
  for (const c of cases) {
    it(`${c.name} (${c.path})`, async () => {
      const small = await post(`${here.url}${c.path}`, c.body);
      const big = { ...c.body, ...PAD };
      const onThread = vi.spyOn(pooled.pre, 'runTokenizerBody');
      try {
        const threaded = await post(`${pooled.url}${c.path}`, big);
        const inline = await post(`${here.url}${c.path}`, big);
        expect(onThread).toHaveBeenCalledTimes(1);
        // Anthropic's error shape names the request: the one thing that differs.
        const answer = (r: typeof inline): unknown => ({
          status: r.status,
          json: { ...r.json, request_id: undefined },
        });
        expect(answer(threaded)).toEqual(answer(inline));
        // The member they do not read changes nothing.
        expect(inline.status).toBe(small.status);
        if (small.status === 200) expect(inline.json).toEqual(small.json);
        else expect(inline.json.error.code).toBe(small.json.error.code);
      } finally {
        onThread.mockRestore();
      }
    });
  }
});

describe('a large body on a tokenizer endpoint', () => {
  it('is never parsed on the main thread', async () => {
    const parse = vi.spyOn(JSON, 'parse');
    try {
      for (const c of cases.slice(0, 5))
        expect((await post(`${pooled.url}${c.path}`, { ...c.body, ...PAD })).status).toBe(200);
      const long = (s: unknown): boolean => typeof s === 'string' && s.length > 10_000;
      expect(parse.mock.calls.filter(([text]) => long(text)).length).toBe(0);
    } finally {
      parse.mockRestore();
    }
  });

  it("holds the event loop no longer than a completion's body of the same size", async () => {
    const body = JSON.stringify({ model: 'demo', prompt: 'hi', pad: Array.from({ length: 1_900_000 }, () => 0) });
    const maxDelayMs = async (path: string): Promise<number> => {
      const h = monitorEventLoopDelay({ resolution: 1 });
      h.enable();
      const r = await post(`${pooled.url}${path}`, body);
      h.disable();
      expect(r.status).toBe(200);
      return h.max / 1e6;
    };
    // Each path twice, interleaved, keeping the lower: a collection or a slow socket read is not the path's cost.
    const completion = Math.min(await maxDelayMs('/v1/completions'), await maxDelayMs('/v1/completions'));
    const tokenize = Math.min(await maxDelayMs('/tokenize'), await maxDelayMs('/tokenize'));
    expect(tokenize).toBeLessThan(2 * completion + 10);
  }, 60_000);
});
