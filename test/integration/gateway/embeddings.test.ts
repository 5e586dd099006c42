/**
 * `POST /v1/embeddings` through `kvgate serve` in front of two `kvgate mocker` engines (real processes, real
 * sockets, KV events), read by the official `openai` client: a string, strings, token ids (the client's default
 * base64 and explicit floats), bad input in OpenAI's error shape with stable codes, an engine's refusal passed on.
 * An embedding is routed by load alone: a worker holding the input's whole prefix, but busy, is passed over for
 * an idle one, where a chat with that prompt goes to the prefix (what prefix credit would do).
 */
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServeCli } from '../../helpers/cli-process.js';
import { metric } from '../../helpers/metric-sum.js';
import { serveConfig, startMockerSuite, workerEntry, type MockerSuite } from '../../helpers/serve-suite.js';
import { until } from '../../helpers/until.js';

const MODEL = 'mock-model';
const KEY = 'sk-kvgate-embeddings';

const norm = (v: number[]): number => Math.hypot(...v);

describe('embeddings through kvgate serve', () => {
  let suite: MockerSuite;
  let url: string;
  let openai: OpenAI;

  const post = async (path: string, body: unknown): Promise<{ status: number; json: Record<string, unknown> }> => {
    const res = await fetch(`${url}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${KEY}` },
      body: JSON.stringify(body),
    });
    return { status: res.status, json: (await res.json()) as Record<string, unknown> };
  };

  beforeAll(async () => {
    suite = await startMockerSuite('embeddings', ['--speedup', '100', '--tokenizer', 'demo'], 2);
    const workers = suite.engines.map((e, i) => `  - ${workerEntry(i + 1, e)}`);
    const top = ['admin: { enabled: true }', 'preprocess: { threads: 1 }', `auth: { api_keys: ["${KEY}"] }`];
    const served = await startServeCli(suite.write('serve.yaml', serveConfig(MODEL, ['workers:', ...workers], top)));
    suite.procs.push(served.proc);
    url = served.url;
    openai = new OpenAI({ baseURL: `${url}/v1`, apiKey: KEY, maxRetries: 0 });
  });

  afterAll(async () => {
    await suite?.stop();
  });

  it('embeds a string, strings and token ids, as floats and as base64', async () => {
    const one = await openai.embeddings.create({ model: MODEL, input: 'The quick brown fox.' }).withResponse();
    expect(one.response.headers.get('x-kvgate-worker')).toMatch(/^[12]$/);
    expect(one.data.object).toBe('list');
    expect(one.data.data).toHaveLength(1);
    const vector = one.data.data[0]!.embedding;
    expect(vector).toHaveLength(64);
    expect(norm(vector)).toBeCloseTo(1, 5);
    const ids = (await post('/tokenize', { model: MODEL, prompt: 'The quick brown fox.' })).json.tokens as number[];
    expect(one.data.usage.prompt_tokens).toBe(ids.length);

    const many = await openai.embeddings.create({
      model: MODEL,
      input: ['The quick brown fox.', 'Another text', 'A third'],
      encoding_format: 'float',
      dimensions: 16,
    });
    expect(many.data.map((d) => d.index)).toEqual([0, 1, 2]);
    expect(many.data[0]!.embedding).toHaveLength(16);
    expect(norm(many.data[1]!.embedding)).toBeCloseTo(1, 5);
    const fromIds = await openai.embeddings.create({ model: MODEL, input: ids, encoding_format: 'float' });
    // The same tokens, the same vector: the base64 floats decoded by the client equal the float answer.
    expect(fromIds.data[0]!.embedding.map((x) => Math.fround(x))).toEqual(vector);
    const lists = await openai.embeddings.create({
      model: MODEL,
      input: [
        [1, 2, 3],
        [4, 5],
      ],
    });
    expect(lists.data).toHaveLength(2);
    expect(lists.usage.prompt_tokens).toBe(5);
    // A body over 16 KiB is parsed and weighed on a preprocessing thread: the same answer.
    const batch = Array.from({ length: 2048 }, (_, i) => `input number ${i}`);
    const large = await openai.embeddings.create({ model: MODEL, input: batch });
    expect(large.data).toHaveLength(2048);
    expect(large.data[2047]!.index).toBe(2047);
    expect(await metric(url, 'kvgate_http_requests_total', { route: '/v1/embeddings', status: '200' })).toBe(5);
  });

  it("refuses bad input in OpenAI's error shape, and passes on the engine's refusal", async () => {
    const empty = await openai.embeddings.create({ model: MODEL, input: [] }).catch((e: unknown) => e);
    expect(empty).toBeInstanceOf(OpenAI.BadRequestError);
    expect((empty as InstanceType<typeof OpenAI.BadRequestError>).code).toBe('KVG_ERR_INVALID_REQUEST');
    const mixed = await post('/v1/embeddings', { model: MODEL, input: [1, 'a'] });
    expect(mixed.status).toBe(400);
    expect(mixed.json).toMatchObject({ error: { code: 'KVG_ERR_INVALID_REQUEST', param: 'input' } });
    const streamed = await post('/v1/embeddings', { model: MODEL, input: 'x', stream: true });
    expect(streamed.json).toMatchObject({ error: { code: 'KVG_ERR_INVALID_REQUEST', param: 'stream' } });
    const format = await post('/v1/embeddings', { model: MODEL, input: 'x', encoding_format: 'int8' });
    expect(format.json).toMatchObject({ error: { code: 'KVG_ERR_INVALID_REQUEST', param: 'encoding_format' } });
    const unknown = await openai.embeddings.create({ model: 'nope', input: 'x' }).catch((e: unknown) => e);
    expect(unknown).toBeInstanceOf(OpenAI.NotFoundError);
    const tokenData = await post('/v1/embeddings', { model: MODEL, input: 'x', nvext: { token_data: [1, 2] } });
    expect(tokenData.json).toMatchObject({ error: { code: 'KVG_ERR_UNSUPPORTED_CONTENT', param: 'nvext.token_data' } });
    // The engine's own refusal (more dimensions than its vectors have) reaches the client with its status.
    const wide = await post('/v1/embeddings', { model: MODEL, input: 'x', dimensions: 4096 });
    expect(wide.status).toBe(400);
    expect(wide.json).toMatchObject({ error: { code: 'KVG_ERR_ENGINE_REJECTED' } });
    expect(String((wide.json.error as { message: string }).message)).toContain('dimensions');
  });

  it('is routed by load, not by the prefix a worker holds', async () => {
    const prompt = Array.from({ length: 90 }, (_, i) => `Line ${i} of the shared document.`).join(' ');
    // Worker 2 caches the prompt's blocks (a completion pinned to it), then becomes busy with a slow stream.
    const warm = await post('/v1/completions', {
      model: MODEL,
      prompt,
      max_tokens: 1,
      nvext: { backend_instance_id: 2 },
    });
    expect(warm.status).toBe(200);
    await until(
      async () =>
        ((await post('/v1/route', { model: MODEL, prompt, max_tokens: 1 })).json.overlap_blocks as number) > 20,
      "worker 2's KV events naming the prompt's blocks",
      10_000,
    );
    const engine2 = suite.engines[1]!.url;
    const slow = (factor: number): Promise<Response> =>
      fetch(`${engine2}/admin/faults`, { method: 'POST', body: JSON.stringify({ slow_factor: factor }) });
    await slow(100_000);
    const busy = new AbortController();
    const held = fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${KEY}` },
      body: JSON.stringify({
        model: MODEL,
        messages: [{ role: 'user', content: 'Keep worker 2 busy.' }],
        max_tokens: 500,
        stream: true,
        nvext: { backend_instance_id: 2 },
      }),
      signal: busy.signal,
    }).catch(() => undefined);
    try {
      await until(
        async () => (await metric(url, 'kvgate_worker_active_requests', { worker_id: '2' })) === 1,
        'the stream booked on worker 2',
      );
      // Prefix credit outweighs worker 2's load: a completion of the prompt would go there.
      const routed = await post('/v1/route', { model: MODEL, prompt, max_tokens: 1 });
      expect(routed.json.worker).toMatchObject({ worker_id: 2 });
      for (let i = 0; i < 3; i++) {
        const res = await openai.embeddings.create({ model: MODEL, input: prompt }).withResponse();
        expect(res.response.headers.get('x-kvgate-worker')).toBe('1');
      }
    } finally {
      busy.abort();
      await held;
      await slow(1);
    }
  });
});
