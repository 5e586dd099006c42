/**
 * `limits.max_response_bytes` through `kvgate serve` in front of two `kvgate mocker` engines (real processes, real
 * sockets): the largest answer the gateway holds whole, set here to 64 KiB where the default is 64 MiB.
 * - a `stream: false` chat whose answer, assembled from the engine's stream, grows past it: 502
 *   KVG_ERR_ANSWER_TOO_LARGE naming the bound, the engine's request cancelled and the booking freed; a short one
 *   is answered whole;
 * - an engine's unstreamed answer past it (embeddings of many inputs): 502 KVG_ERR_ENGINE_BAD_RESPONSE, `too_large`;
 * - a streamed answer of the same length is relayed whole: the bound is on what is held, not on what is relayed.
 * Before the key, both bounds were fixed at 64 MiB, and an operator could not raise or lower them.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { metric } from '../../helpers/metric-sum.js';
import {
  postChat,
  serveConfig,
  serveInSuite,
  startMockerSuite,
  workerEntry,
  type MockerSuite,
} from '../../helpers/serve-suite.js';
import { readSse } from '../../helpers/sse-reader.js';
import { until } from '../../helpers/until.js';

const MODEL = 'mock-model';
const BOUND = 64 * 1024;

describe('limits.max_response_bytes', () => {
  let suite: MockerSuite;
  let url: string;

  beforeAll(async () => {
    suite = await startMockerSuite(
      'response-bound',
      ['--speedup', '1000', '--tokenizer', 'demo', '--max-model-len', '65536'],
      2,
    );
    const workers = suite.engines.map((e, i) => `  - ${workerEntry(i + 1, e)}`);
    const top = ['admin: { enabled: true }', 'preprocess: { threads: 0 }', `limits: { max_response_bytes: ${BOUND} }`];
    url = await serveInSuite(suite, suite.write('serve.yaml', serveConfig(MODEL, ['workers:', ...workers], top)));
  });

  afterAll(async () => {
    await suite?.stop();
  });

  const chat = (
    maxTokens: number,
    stream: boolean,
  ): Record<string, unknown> & { model: string; messages: unknown } => ({
    model: MODEL,
    max_tokens: maxTokens,
    ignore_eos: true,
    stream,
    messages: [{ role: 'user', content: 'Tell a long story.' }],
  });

  it('a stream: false answer past the bound is refused with 502 KVG_ERR_ANSWER_TOO_LARGE; a short one is answered', async () => {
    const short = await postChat(url, chat(100, false));
    expect(short.status).toBe(200);
    const answer = (await short.json()) as { choices: { message: { content: string } }[] };
    expect(answer.choices[0]!.message.content.length).toBeGreaterThan(0);

    const long = await postChat(url, chat(40_000, false));
    expect(long.status).toBe(502);
    const body = (await long.json()) as { error: { code: string; message: string; detail?: { maxBytes: number } } };
    expect(body.error.code).toBe('KVG_ERR_ANSWER_TOO_LARGE');
    expect(body.error.message).toContain(`${BOUND} bytes`);
    await until(async () => (await metric(url, 'kvgate_worker_active_requests')) === 0, 'the booking freed');
    expect(await metric(url, 'kvgate_router_request_errors_total', { code: 'KVG_ERR_ANSWER_TOO_LARGE' })).toBe(1);
  });

  it('the same answer streamed is relayed whole', async () => {
    const r = await readSse(`${url}/v1/chat/completions`, chat(40_000, true), {});
    expect(r.status).toBe(200);
    expect(r.ending).toBe('end');
    expect(r.text.length).toBeGreaterThan(BOUND);
    expect(r.text).toContain('data: [DONE]');
  });

  it("an engine's unstreamed answer past the bound: 502 KVG_ERR_ENGINE_BAD_RESPONSE (too_large)", async () => {
    const input = Array.from({ length: 200 }, (_, i) => `input number ${i}`);
    const res = await fetch(`${url}/v1/embeddings`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, input }),
    });
    expect(res.status).toBe(502);
    const body = (await res.json()) as { error: { code: string; detail?: { violation?: string } } };
    expect(body.error.code).toBe('KVG_ERR_ENGINE_BAD_RESPONSE');
    const few = await fetch(`${url}/v1/embeddings`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, input: input.slice(0, 4) }),
    });
    expect(few.status).toBe(200);
  });
});
