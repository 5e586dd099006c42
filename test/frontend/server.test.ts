import { request as httpRequest } from 'node:http';
import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import { demoTokenizerFiles, loadTokenizer } from '../../src/tokenizer/index.js';
import { until } from '../helpers/until.js';
import { KEY, chat, post, start } from './server-harness.js';

describe('gateway server: endpoints', () => {
  it('health, readiness and /v1/models follow canServe()', async () => {
    const g = await start();
    expect((await fetch(`${g.url}/health`)).status).toBe(200);
    const ready = await fetch(`${g.url}/ready`);
    expect(ready.status).toBe(200);
    expect(((await ready.json()) as { models: string[] }).models).toEqual(['demo', 'direct', 'approx']);
    g.routers.approx.servable = false;
    const models = (await (await fetch(`${g.url}/v1/models`)).json()) as {
      object: string;
      data: { id: string; object: string }[];
    };
    expect(models.object).toBe('list');
    expect(models.data.map((m) => m.id)).toEqual(['demo', 'direct']);
    expect((await (await fetch(`${g.url}/v1/models/demo`)).json()) as object).toMatchObject({
      id: 'demo',
      object: 'model',
    });
    expect((await fetch(`${g.url}/v1/models/approx`)).status).toBe(404);
    const unavailable = await post(`${g.url}/v1/completions`, { model: 'approx', prompt: 'hi' });
    expect(unavailable.status).toBe(503);
    expect(unavailable.json.error.code).toBe('KVG_ERR_MODEL_UNAVAILABLE');
    expect(unavailable.headers.get('retry-after')).toBe('1');
    for (const r of Object.values(g.routers)) r.servable = false;
    const notReady = await fetch(`${g.url}/ready`);
    expect(notReady.status).toBe(503);
    expect((await notReady.json()) as object).toMatchObject({ status: 'no_servable_model' });
  });

  it('chat completions: tokenized prompt and hashes reach the router, nvext is stripped, worker and request id come back', async () => {
    const g = await start();
    const r = await post(
      `${g.url}/v1/chat/completions`,
      chat('Hello there', {
        nvext: { annotations: ['x'], agent_hints: { osl: 64, priority: 2 } },
        cache_salt: 'tenant-a',
      }),
      { 'x-request-id': 'my-req-1', 'x-session-id': 'sess-9' },
    );
    expect(r.status).toBe(200);
    expect(r.json.choices[0].message.content).toBe('Hello from the fake engine');
    expect(r.headers.get('x-request-id')).toBe('my-req-1');
    expect(r.headers.get('x-kvgate-worker')).toMatch(/^[123]$/);
    expect(r.headers.get('x-kvgate-worker-dp-rank')).toBe('0');
    const got = g.routers.demo.routed[0]!;
    expect(got.requestId).toBe('my-req-1');
    expect(got.endpoint).toBe('chat');
    expect(got.stream).toBe(false);
    expect(got.body).toEqual(chat('Hello there', { cache_salt: 'tenant-a' }));
    const tok = loadTokenizer(demoTokenizerFiles());
    expect([...got.tokenIds]).toEqual(
      await tok.encode(tok.renderChat([{ role: 'user', content: 'Hello there' }]), { addSpecialTokens: false }),
    );
    expect(got.hashes.local.length).toBe(Math.floor(got.tokenIds.length / 16));
    expect(got.hints).toMatchObject({
      session: { id: 'sess-9' },
      expectedOutputTokens: 64,
      priorityJump: 2,
      annotations: ['x'],
    });
    expect(got.queryOnly).toBe(false);
    expect(got.approximate).toBe(false);
  });

  it('streams SSE events through untouched, [DONE] included', async () => {
    const g = await start();
    const r = await fetch(`${g.url}/v1/completions`, {
      method: 'POST',
      body: JSON.stringify({ model: 'demo', prompt: 'Once upon a time', stream: true }),
    });
    expect(r.status).toBe(200);
    expect(r.headers.get('content-type')).toMatch(/^text\/event-stream/);
    const text = await r.text();
    const events = text.split('\n\n').filter((e) => e !== '');
    expect(events.length).toBe(7);
    expect(events.every((e) => e.startsWith('data: '))).toBe(true);
    expect(events.at(-1)).toBe('data: [DONE]');
    expect(
      events
        .slice(0, 5)
        .map((e) => (JSON.parse(e.slice(6)) as { choices: { text: string }[] }).choices[0]!.text)
        .join(''),
    ).toBe('Hello from the fake engine');
    expect(g.routers.demo.released.at(-1)!.how).toBe('end');
  });

  it('the official openai client: chat and text completions, streaming and not, with usage; a conversation sticks to its worker', async () => {
    const g = await start();
    const client = new OpenAI({ apiKey: 'unused', baseURL: `${g.url}/v1`, maxRetries: 0 });
    const { data, response } = await client.chat.completions
      .create({ model: 'demo', messages: [{ role: 'user', content: 'Tell me a story about a long river.' }] })
      .withResponse();
    expect(data.choices[0]!.message.content).toBe('Hello from the fake engine');
    expect(data.usage!.prompt_tokens).toBeGreaterThan(5);
    const worker = response.headers.get('x-kvgate-worker');
    const stream = await client.chat.completions.create({
      model: 'demo',
      stream: true,
      messages: [
        { role: 'user', content: 'Tell me a story about a long river.' },
        { role: 'assistant', content: 'Hello from the fake engine' },
        { role: 'user', content: 'And then?' },
      ],
    });
    let text = '';
    let usage: unknown;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta?.content ?? '';
      usage = chunk.usage ?? usage;
    }
    expect(text).toBe('Hello from the fake engine');
    expect(usage).toMatchObject({ completion_tokens: 5 });
    // The second turn shares the first turn's prefix blocks, so the prefix-matching router keeps the worker.
    expect(g.routers.demo.routed[1]!.hints.backendInstanceId).toBeUndefined();
    const second = await client.chat.completions
      .create({
        model: 'demo',
        messages: [
          { role: 'user', content: 'Tell me a story about a long river.' },
          { role: 'assistant', content: 'x' },
          { role: 'user', content: 'more' },
        ],
      })
      .withResponse();
    expect(second.response.headers.get('x-kvgate-worker')).toBe(worker);
    const completion = await client.completions.create({ model: 'demo', prompt: 'Say hi' });
    expect(completion.choices[0]!.text).toBe('Hello from the fake engine');
    const cstream = await client.completions.create({ model: 'demo', prompt: [1, 2, 3, 4], stream: true });
    let ctext = '';
    for await (const chunk of cstream) ctext += chunk.choices[0]?.text ?? '';
    expect(ctext).toBe('Hello from the fake engine');
    expect([...g.routers.demo.routed.at(-1)!.tokenIds]).toEqual([1, 2, 3, 4]);
  });

  it('/metrics serves Prometheus text with the HTTP counters', async () => {
    const g = await start();
    await fetch(`${g.url}/v1/models`);
    const r = await fetch(`${g.url}/metrics`);
    expect(r.status).toBe(200);
    expect(r.headers.get('content-type')).toMatch(/^text\/plain/);
    expect(await r.text()).toMatch(/kvgate_http_requests_total\{route="\/v1\/models",status="200"\} 1/);
  });

  it('x-request-id is kept when well-formed and replaced otherwise', async () => {
    const g = await start();
    expect(
      (await fetch(`${g.url}/health`, { headers: { 'x-request-id': 'abc-123' } })).headers.get('x-request-id'),
    ).toBe('abc-123');
    const replaced = (await fetch(`${g.url}/health`, { headers: { 'x-request-id': 'has space' } })).headers.get(
      'x-request-id',
    );
    expect(replaced).toMatch(/^[0-9a-f-]{36}$/);
  });
});

describe('gateway server: query-only routing', () => {
  it('POST /v1/route returns worker, dp rank, overlap and token ids, and books nothing', async () => {
    const g = await start();
    await post(
      `${g.url}/v1/chat/completions`,
      chat('a shared prefix that is long enough to fill a couple of blocks of sixteen tokens each, surely'),
    );
    const q = await post(
      `${g.url}/v1/route`,
      chat('a shared prefix that is long enough to fill a couple of blocks of sixteen tokens each, surely'),
    );
    expect(q.status).toBe(200);
    const first = g.routers.demo.routed[0]!;
    expect(q.json).toMatchObject({
      object: 'kvgate.route',
      model: 'demo',
      worker: { worker_id: Number(q.headers.get('x-kvgate-worker')), dp_rank: 0 },
      prefill_worker: null,
      block_size: 16,
      prompt_tokens: first.tokenIds.length,
      prompt_blocks: first.hashes.local.length,
      approximate: false,
    });
    expect(q.json.overlap_blocks).toBe(first.hashes.local.length);
    expect(q.json.token_ids).toEqual([...first.tokenIds]);
    expect(q.json.worker_id).toEqual({
      prefill_worker_id: q.json.worker.worker_id,
      prefill_dp_rank: 0,
      decode_worker_id: q.json.worker.worker_id,
      decode_dp_rank: 0,
    });
    expect(g.routers.demo.routed.length).toBe(1);
    expect(g.routers.demo.queried.length).toBe(1);
    expect(g.routers.demo.queried[0]!.queryOnly).toBe(true);
    const completion = await post(`${g.url}/v1/route`, { model: 'demo', prompt: [5, 6, 7] });
    expect(completion.json.token_ids).toEqual([5, 6, 7]);
  });

  it('the query_instance_id: annotation answers with nvext.worker_id and nvext.token_ids (Dynamo), streaming or not', async () => {
    const g = await start();
    const r = await post(
      `${g.url}/v1/chat/completions`,
      chat('hi', { nvext: { annotations: ['query_instance_id:'] } }),
    );
    expect(r.status).toBe(200);
    expect(r.json).toMatchObject({
      object: 'chat.completion',
      choices: [],
      nvext: { worker_id: { decode_worker_id: expect.any(Number) } },
    });
    expect(r.json.nvext.token_ids.length).toBeGreaterThan(3);
    const s = await fetch(`${g.url}/v1/completions`, {
      method: 'POST',
      body: JSON.stringify({
        model: 'demo',
        prompt: 'x',
        stream: true,
        nvext: { annotations: ['query_instance_id:abc'] },
      }),
    });
    const events = (await s.text()).split('\n\n').filter((e) => e !== '');
    expect(events.length).toBe(2);
    expect(JSON.parse(events[0]!.slice(6))).toMatchObject({
      object: 'text_completion',
      choices: [],
      nvext: { token_ids: expect.any(Array) },
    });
    expect(events[1]).toBe('data: [DONE]');
    // query_instance_id_extra: is not the trigger.
    const routed = await post(
      `${g.url}/v1/chat/completions`,
      chat('hi', { nvext: { annotations: ['query_instance_id_extra:1'] } }),
    );
    expect(routed.json.choices.length).toBe(1);
    expect(g.routers.demo.routed.length).toBe(1);
    expect(g.routers.demo.queried.length).toBe(2);
  });
});

describe('gateway server: every bad request class gets its 4xx error object, and the server keeps serving', () => {
  it('answers each bad request with a stable code, then still serves', async () => {
    const g = await start({ auth: { api_keys: [KEY] } });
    const auth = { authorization: `Bearer ${KEY}` };
    const cases: {
      name: string;
      path?: string;
      body: unknown;
      headers?: Record<string, string>;
      status: number;
      code: string;
      param?: string;
    }[] = [
      {
        name: 'invalid JSON',
        body: '{"model": "demo", "messages": [',
        headers: auth,
        status: 400,
        code: 'KVG_ERR_INVALID_JSON',
      },
      { name: 'not an object', body: '[1,2]', headers: auth, status: 400, code: 'KVG_ERR_INVALID_JSON' },
      {
        name: 'wrong type',
        body: { model: 'demo', messages: [{ role: 'user', content: 42 }] },
        headers: auth,
        status: 400,
        code: 'KVG_ERR_INVALID_REQUEST',
        param: 'messages[0].content',
      },
      {
        name: 'missing field',
        body: { model: 'demo' },
        headers: auth,
        status: 400,
        code: 'KVG_ERR_INVALID_REQUEST',
        param: 'messages',
      },
      {
        name: 'wrong stream type',
        body: chat('x', { stream: 'yes' }),
        headers: auth,
        status: 400,
        code: 'KVG_ERR_INVALID_REQUEST',
        param: 'stream',
      },
      {
        name: 'unknown model',
        body: { ...chat('x'), model: 'gpt-9' },
        headers: auth,
        status: 404,
        code: 'KVG_ERR_MODEL_NOT_FOUND',
        param: 'model',
      },
      {
        name: 'body over the limit',
        body: chat('x'.repeat(70 * 1024)),
        headers: auth,
        status: 413,
        code: 'KVG_ERR_BODY_TOO_LARGE',
      },
      {
        name: 'prompt over the limit',
        body: chat('word '.repeat(3000)),
        headers: auth,
        status: 400,
        code: 'KVG_ERR_PROMPT_TOO_LONG',
      },
      {
        name: 'prompt over the per-model limit',
        body: { model: 'direct', messages: [{ role: 'user', content: 'word '.repeat(60) }] },
        headers: { ...auth, 'x-worker-instance-id': '11' },
        status: 400,
        code: 'KVG_ERR_PROMPT_TOO_LONG',
      },
      {
        name: 'unknown pinned worker',
        body: chat('x'),
        headers: { ...auth, 'x-worker-instance-id': '99' },
        status: 400,
        code: 'KVG_ERR_UNKNOWN_WORKER',
      },
      {
        name: 'unknown pinned worker (nvext)',
        body: chat('x', { nvext: { backend_instance_id: 77 } }),
        headers: auth,
        status: 400,
        code: 'KVG_ERR_UNKNOWN_WORKER',
      },
      {
        name: 'missing worker id in direct mode',
        body: { model: 'direct', messages: [{ role: 'user', content: 'x' }] },
        headers: auth,
        status: 400,
        code: 'KVG_ERR_MISSING_WORKER_ID',
      },
      {
        name: 'wrong API key',
        body: chat('x'),
        headers: { authorization: 'Bearer wrong-key-000000' },
        status: 401,
        code: 'KVG_ERR_UNAUTHORIZED',
      },
      { name: 'no API key', body: chat('x'), status: 401, code: 'KVG_ERR_UNAUTHORIZED' },
      {
        name: 'malformed pin header',
        body: chat('x'),
        headers: { ...auth, 'x-worker-instance-id': 'one' },
        status: 400,
        code: 'KVG_ERR_INVALID_REQUEST',
        param: 'x-worker-instance-id',
      },
      {
        name: 'pins that contradict',
        body: chat('x', { nvext: { backend_instance_id: 2 } }),
        headers: { ...auth, 'x-worker-instance-id': '1' },
        status: 400,
        code: 'KVG_ERR_INVALID_REQUEST',
        param: 'nvext.backend_instance_id',
      },
      {
        name: 'bad nvext type',
        body: chat('x', { nvext: { dp_rank: -1 } }),
        headers: auth,
        status: 400,
        code: 'KVG_ERR_INVALID_REQUEST',
        param: 'nvext.dp_rank',
      },
      {
        name: 'bad router override',
        body: chat('x', { nvext: { router_config_override: { router_temperature: -2 } } }),
        headers: auth,
        status: 400,
        code: 'KVG_ERR_INVALID_REQUEST',
        param: 'nvext.router_config_override.router_temperature',
      },
      {
        name: 'batch prompt',
        path: '/v1/completions',
        body: { model: 'demo', prompt: ['a', 'b'] },
        headers: auth,
        status: 400,
        code: 'KVG_ERR_UNSUPPORTED_CONTENT',
        param: 'prompt',
      },
      {
        name: 'image part',
        body: {
          model: 'demo',
          messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'x' } }] }],
        },
        headers: auth,
        status: 400,
        code: 'KVG_ERR_UNSUPPORTED_CONTENT',
        param: 'messages[0].content[0].type',
      },
      {
        name: 'bad prompt shape',
        path: '/v1/completions',
        body: { model: 'demo', prompt: [1.5] },
        headers: auth,
        status: 400,
        code: 'KVG_ERR_INVALID_REQUEST',
        param: 'prompt',
      },
      {
        name: 'unknown path',
        path: '/v1/audio/transcriptions',
        body: {},
        headers: auth,
        status: 404,
        code: 'KVG_ERR_NOT_FOUND',
      },
    ];
    for (const c of cases) {
      const r = await post(`${g.url}${c.path ?? '/v1/chat/completions'}`, c.body, c.headers);
      expect(r.status, c.name).toBe(c.status);
      expect(r.json.error, c.name).toMatchObject({
        code: c.code,
        type: expect.any(String),
        message: expect.any(String),
      });
      expect(Object.keys(r.json.error).sort(), c.name).toEqual(['code', 'message', 'param', 'type']);
      if (c.param !== undefined) expect(r.json.error.param, c.name).toBe(c.param);
      expect((await fetch(`${g.url}/health`)).status, `${c.name}: still serving`).toBe(200);
    }
    // A field with several accepted shapes says what it accepts, not why the first shape failed.
    const shapes = await post(`${g.url}/v1/completions`, { model: 'demo', prompt: [1, 2, -3] }, auth);
    expect(shapes.json.error.message).toBe(
      'prompt must be a string, a list of token ids, or a list holding one string or one list of token ids',
    );
    const wrongMethod = await fetch(`${g.url}/v1/chat/completions`, { headers: auth });
    expect(wrongMethod.status).toBe(405);
    expect(wrongMethod.headers.get('allow')).toBe('POST');
    const ok = await post(`${g.url}/v1/chat/completions`, chat('finally a good one'), auth);
    expect(ok.status).toBe(200);
    // Only the good one reached the router: unknown pins are refused at the edge against the model's configured
    // workers (issue 13 item 13), with the same code the router gives.
    expect(g.routers.demo.routed.length).toBe(1);
  });

  it('a model without tokenizer routes on approximate hashes, marked as such', async () => {
    const g = await start();
    const r = await post(`${g.url}/v1/completions`, { model: 'approx', prompt: 'hello world' });
    expect(r.status).toBe(200);
    expect(g.routers.approx.routed[0]!.approximate).toBe(true);
  });
});

describe('gateway server: limits, disconnects, timeouts and errors mid-stream', () => {
  it('answers 429 with Retry-After beyond max_concurrent_requests', async () => {
    const g = await start();
    g.routers.demo.hold();
    const held = Array.from({ length: 4 }, (_, i) => post(`${g.url}/v1/chat/completions`, chat(`held ${i}`)));
    await waitFor(() => g.server.inflight === 4 && g.routers.demo.routed.length === 4);
    const over = await post(`${g.url}/v1/chat/completions`, chat('one too many'));
    expect(over.status).toBe(429);
    expect(over.json.error.code).toBe('KVG_ERR_TOO_MANY_REQUESTS');
    expect(over.headers.get('retry-after')).toBe('1');
    g.routers.demo.release();
    expect((await Promise.all(held)).map((r) => r.status)).toEqual([200, 200, 200, 200]);
    await waitFor(() => g.server.inflight === 0);
    expect((await post(`${g.url}/v1/chat/completions`, chat('room again'))).status).toBe(200);
  });

  it("a client that disconnects mid-stream aborts the signal and returns the port's iterator", async () => {
    const g = await start();
    g.routers.demo.hold();
    const port = Number(new URL(g.url).port);
    await new Promise<void>((resolve, reject) => {
      const req = httpRequest(
        {
          host: '127.0.0.1',
          port,
          path: '/v1/chat/completions',
          method: 'POST',
          headers: { 'content-type': 'application/json' },
        },
        (res) => {
          res.once('data', () => {
            req.destroy();
            resolve();
          });
        },
      );
      req.on('error', () => undefined);
      req.end(JSON.stringify(chat('stream then leave', { stream: true })));
      setTimeout(() => reject(new Error('no first event')), 5000).unref();
    });
    await waitFor(() => g.routers.demo.released.length === 1);
    expect(g.routers.demo.released[0]!.how).toBe('abort');
    expect(g.routers.demo.routed[0]!.signal.aborted).toBe(true);
    expect((g.routers.demo.routed[0]!.signal.reason as { code: string }).code).toBe('KVG_ERR_CLIENT_ABORTED');
    await waitFor(() => g.server.inflight === 0);
    g.routers.demo.release();
  });

  it("a client that leaves while its stream waits for it to read returns the port's iterator", async () => {
    const g = await start();
    const choice = { index: 0, text: 'x'.repeat(1000), finish_reason: null };
    const data = JSON.stringify({ id: 'cmpl-1', object: 'text_completion', choices: [choice] });
    const raw = new TextEncoder().encode(`data: ${data}\n\n`);
    // 40 MB: far more than the sockets between the gateway and a client that reads nothing hold.
    const events = 40_000;
    g.routers.demo.rawEvents = Array.from({ length: events }, () => ({ raw, data }));
    const port = Number(new URL(g.url).port);
    const headers = { 'content-type': 'application/json' };
    const req = httpRequest({ host: '127.0.0.1', port, path: '/v1/completions', method: 'POST', headers }, (res) => {
      // The client stops reading after its first bytes.
      res.once('data', () => res.pause());
    });
    req.on('error', () => undefined);
    req.end(JSON.stringify({ model: 'demo', prompt: 'a very long answer', stream: true }));
    // The relay takes events only as the client reads: once it waits for the client, it takes none between
    // two polls (every turn between them would have taken more), far short of the stream's end.
    let last = -1;
    await until(() => {
      const n = g.routers.demo.rawYielded;
      const waiting = n === last && n > 0;
      last = n;
      return waiting;
    }, 'the relay waiting for its client');
    expect(last).toBeLessThan(events);
    expect(g.routers.demo.released).toEqual([]);
    req.destroy();
    // Before the fix the relay took the request's abort for a failure of the stream and never returned the
    // iterator: the port's booking stayed, its engine request ran on.
    await waitFor(() => g.routers.demo.released.length === 1);
    expect(g.routers.demo.released[0]!.how).toBe('return');
    await waitFor(() => g.server.inflight === 0);
  });

  it('the request timeout: 504 before the response starts, an error event after', async () => {
    const g = await start({ limits: { request_timeout_ms: 300, max_concurrent_requests: 4 } });
    g.routers.demo.hold();
    const json = await post(`${g.url}/v1/chat/completions`, chat('slow'));
    expect(json.status).toBe(504);
    expect(json.json.error.code).toBe('KVG_ERR_REQUEST_TIMEOUT');
    const s = await fetch(`${g.url}/v1/chat/completions`, {
      method: 'POST',
      body: JSON.stringify(chat('slow stream', { stream: true })),
    });
    expect(s.status).toBe(200);
    const events = (await s.text()).split('\n\n').filter((e) => e !== '');
    expect(events.length).toBe(2);
    expect(JSON.parse(events[1]!.slice(6))).toMatchObject({ error: { code: 'KVG_ERR_REQUEST_TIMEOUT' } });
    g.routers.demo.release();
  });

  // issue 13 item 1: a stalled body is cut by the pause allowed between chunks (408), before it takes a slot
  it('a client that sends its body too slowly is cut by the body timeout with 408', async () => {
    const g = await start({ limits: { body_timeout_ms: 200, max_concurrent_requests: 4 } });
    const port = Number(new URL(g.url).port);
    const answer = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      const req = httpRequest(
        {
          host: '127.0.0.1',
          port,
          path: '/v1/chat/completions',
          method: 'POST',
          headers: { 'content-type': 'application/json', 'content-length': '1000' },
        },
        (res) => {
          let body = '';
          res.on('data', (d: Buffer) => (body += d.toString()));
          res.on('end', () => {
            req.destroy();
            resolve({ status: res.statusCode!, body });
          });
        },
      );
      req.on('error', reject);
      req.write('{"model": "demo", '); // and never the rest
    });
    expect(answer.status).toBe(408);
    expect(JSON.parse(answer.body)).toMatchObject({ error: { code: 'KVG_ERR_CLIENT_TIMEOUT' } });
    await waitFor(() => g.server.inflight === 0);
  });

  it('an error thrown mid-stream ends the stream with an OpenAI error event', async () => {
    const g = await start();
    g.routers.demo.failAfter = 2;
    const s = await fetch(`${g.url}/v1/chat/completions`, {
      method: 'POST',
      body: JSON.stringify(chat('break', { stream: true })),
    });
    const events = (await s.text()).split('\n\n').filter((e) => e !== '');
    expect(events.length).toBe(3);
    // issue 13 item 10: the client learns the code and the worker, not the engine's own message
    const worker = s.headers.get('x-kvgate-worker');
    expect(JSON.parse(events[2]!.slice(6))).toEqual({
      error: {
        message: `the response of worker ${worker} broke mid-way (KVG_ERR_ENGINE_STREAM_BROKEN); the gateway log has the details`,
        type: 'server_error',
        param: null,
        code: 'KVG_ERR_ENGINE_STREAM_BROKEN',
      },
    });
  });
});

describe('gateway server: admin endpoints and shutdown', () => {
  it('admin endpoints are off the public listener unless enabled', async () => {
    const off = await start();
    expect((await fetch(`${off.url}/admin/config`)).status).toBe(404);
    const on = await start({ admin: { enabled: true }, auth: { api_keys: [KEY] } });
    expect((await fetch(`${on.url}/admin/config`)).status).toBe(401);
    const cfg = await fetch(`${on.url}/admin/config`, { headers: { authorization: `Bearer ${KEY}` } });
    expect(cfg.status).toBe(200);
    const text = await cfg.text();
    expect(text).not.toContain(KEY);
    const separate = await start({ admin: { enabled: true, port: 0 } });
    expect(separate.adminUrl).toBeDefined();
    expect((await fetch(`${separate.url}/admin/models`)).status).toBe(404);
    const models = (await (await fetch(`${separate.adminUrl}/admin/models`)).json()) as {
      models: { name: string; canServe: boolean }[];
    };
    expect(models.models.map((m) => [m.name, m.canServe])).toEqual([
      ['demo', true],
      ['direct', true],
      ['approx', true],
    ]);
    expect((await fetch(`${separate.adminUrl}/v1/models`)).status).toBe(404);
  });

  it('a 404 on an admin path says why: the admin endpoints are off, or on the admin listener', async () => {
    const message = async (url: string): Promise<{ status: number; code: string; message: string }> => {
      const res = await fetch(url);
      const { error } = (await res.json()) as { error: { code: string; message: string } };
      return { status: res.status, code: error.code, message: error.message };
    };
    const off = await start();
    expect(await message(`${off.url}/admin/models`)).toEqual({
      status: 404,
      code: 'KVG_ERR_NOT_FOUND',
      message:
        'no endpoint /admin/models: the admin endpoints are off (admin.enabled: true, or --admin, turns them on)',
    });
    const separate = await start({ admin: { enabled: true, port: 0 } });
    const there = await message(`${separate.url}/admin/models`);
    expect(there.message).toBe(
      'no endpoint /admin/models on this listener: the admin endpoints are served on the admin listener (admin.listen)',
    );
    expect(there.message).not.toContain(String(separate.adminUrl));
    expect((await message(`${off.url}/v1/nothing`)).message).toBe('no endpoint /v1/nothing');
  });

  it('close() drains an in-flight stream to its end while refusing new work', async () => {
    const g = await start();
    g.routers.demo.hold();
    const streaming = fetch(`${g.url}/v1/chat/completions`, {
      method: 'POST',
      body: JSON.stringify(chat('long answer', { stream: true })),
    }).then((r) => r.text());
    await waitFor(() => g.routers.demo.routed.length === 1);
    const closing = g.server.close({ drainTimeoutMs: 5000 });
    expect(g.server.draining).toBe(true);
    // New work is refused: first with an answer (the listener stays open a moment for its backlog), then by the listener.
    const refused = await post(`${g.url}/v1/chat/completions`, chat('too late'));
    expect(refused.status).toBe(503);
    expect(refused.json.error.code).toBe('KVG_ERR_SHUTTING_DOWN');
    expect(refused.headers.get('connection')).toBe('close');
    await waitFor(() => !g.server.listening);
    await expect(fetch(`${g.url}/health`)).rejects.toThrow();
    g.routers.demo.release();
    const text = await streaming;
    expect(text.endsWith('data: [DONE]\n\n')).toBe(true);
    await closing;
    expect(g.routers.demo.released[0]!.how).toBe('end');
  });

  it('close() cuts what is still running at the drain deadline', async () => {
    const g = await start();
    g.routers.demo.hold();
    const streaming = fetch(`${g.url}/v1/chat/completions`, {
      method: 'POST',
      body: JSON.stringify(chat('never ends', { stream: true })),
    }).then((r) => r.text());
    await waitFor(() => g.routers.demo.routed.length === 1);
    await g.server.close({ drainTimeoutMs: 200 });
    const text = await streaming;
    expect(text).toContain('KVG_ERR_SHUTTING_DOWN');
    expect(g.routers.demo.released[0]!.how).toBe('abort');
  });
});

async function waitFor(cond: () => boolean, timeoutMs = 5000): Promise<void> {
  await until(cond, 'condition', timeoutMs);
}
