/**
 * Issue 23, section 2, item 2: `nvext.token_data` books what the engine
 * processes. `kvgate serve` in front of a `kvgate mocker` engine, real
 * processes over real sockets. The engine is held (its `hang` fault) while
 * requests are in flight, so the gateway's per-worker bookkeeping can be read
 * with every request booked; then released, each answer's usage says how many
 * prompt tokens the engine processed.
 *
 * Before the fix a completion's short text went to the engine while the
 * router booked its long `token_data` (eight such requests booked thousands
 * of tokens the engine never saw), and a chat's `token_data` was taken as is.
 * Now a completion's `token_data` is the prompt its engine is sent, and a
 * chat's must be the ids of its messages (else 400 KVG_ERR_TOKEN_DATA_MISMATCH).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startCli } from '../../helpers/cli-process.js';
import { metric } from '../../helpers/metric-sum.js';
import { mulberry32 } from '../../helpers/rng.js';
import { serveConfig, startMockerSuite, workerEntry, type MockerSuite } from '../../helpers/serve-suite.js';
import { until } from '../../helpers/until.js';

const MODEL = 'mock-model';
const BLOCK = 16;

interface Answer {
  status: number;
  promptTokens: number | undefined;
  code: string | undefined;
}

async function post(url: string, path: string, body: unknown): Promise<Answer> {
  const r = await fetch(`${url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  const json = (await r.json()) as { usage?: { prompt_tokens: number }; error?: { code: string } };
  return { status: r.status, promptTokens: json.usage?.prompt_tokens, code: json.error?.code };
}

describe('nvext.token_data books what the engine processes (issue 23, section 2)', () => {
  let suite: MockerSuite;
  let url: string;
  let engine: string;

  const hang = async (on: boolean): Promise<void> => {
    const r = await fetch(`${engine}/admin/faults`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ hang: on }),
    });
    expect(r.status).toBe(200);
  };
  const booked = async (): Promise<{ requests: number; prefillTokens: number; decodeBlocks: number }> => ({
    requests: await metric(url, 'kvgate_worker_active_requests'),
    prefillTokens: await metric(url, 'kvgate_worker_active_prefill_tokens'),
    decodeBlocks: await metric(url, 'kvgate_worker_active_decode_blocks'),
  });

  beforeAll(async () => {
    suite = await startMockerSuite(
      'token-data',
      ['--speedup', '1000', '--tokenizer', 'demo', '--max-model-len', '65536'],
      1,
    );
    engine = suite.engines[0]!.url;
    // Probes far apart: a held engine must not be ejected while the test reads its bookings.
    const file = suite.write(
      'serve.yaml',
      serveConfig(
        MODEL,
        [`block_size: ${BLOCK}`, 'workers:', `  - ${workerEntry(1, suite.engines[0]!)}`],
        ['health: { interval_ms: 600000 }'],
      ),
    );
    const proc = startCli(['serve', '-c', file]);
    suite.procs.push(proc);
    url = (await proc.waitFor(/"listen":"(http:\/\/[^"]+)"/, 'the gateway listening', 60_000))[1]!;
  }, 120_000);
  afterAll(async () => {
    await suite?.stop();
  });

  it('completions with token_data far longer than their text: the booked load is the prompt tokens the engine processes', async () => {
    const rng = mulberry32(23);
    // Distinct ids per request (no shared prefix), long enough that some bodies are parsed off the main thread.
    const lengths = [3000, 3000, 3000, 3000, 300, 300, 300, 300];
    const tokenData = lengths.map((n) => Array.from({ length: n }, () => 1000 + Math.floor(rng() * 50_000)));
    await hang(true);
    let answers: Promise<Answer[]>;
    try {
      answers = Promise.all(
        tokenData.map((ids) =>
          post(url, '/v1/completions', {
            model: MODEL,
            prompt: 'Hello there',
            max_tokens: 1,
            nvext: { token_data: ids },
          }),
        ),
      );
      await until(async () => (await booked()).requests === lengths.length, 'every request booked', 20_000);
      const load = await booked();
      await hang(false);
      const done = await answers;
      expect(done.map((a) => a.status)).toEqual(lengths.map(() => 200));
      // The engine processed each request's token_data, and the router booked exactly that.
      expect(done.map((a) => a.promptTokens)).toEqual(lengths);
      expect(load.prefillTokens).toBe(done.reduce((s, a) => s + a.promptTokens!, 0));
      // The blocks booked are the complete blocks of what the engine processed (a trailing partial block has no hash).
      expect(load.decodeBlocks).toBe(done.reduce((s, a) => s + Math.floor(a.promptTokens! / BLOCK), 0));
    } finally {
      await hang(false);
    }
    await until(async () => (await booked()).requests === 0, 'every booking freed');
  });

  it('a chat whose token_data is not its prompt is refused before anything is booked; its own ids are routed and processed', async () => {
    const body = {
      model: MODEL,
      max_tokens: 1,
      messages: [{ role: 'user', content: 'What is the capital of France?' }],
    };
    const route = await fetch(`${url}/v1/route`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    const ids = ((await route.json()) as { token_ids: number[] }).token_ids;
    expect(ids.length).toBeGreaterThan(5);

    const longer = await post(url, '/v1/chat/completions', {
      ...body,
      nvext: { token_data: [...ids, ...Array.from({ length: 4000 }, () => 11)] },
    });
    expect(longer).toEqual({ status: 400, promptTokens: undefined, code: 'KVG_ERR_TOKEN_DATA_MISMATCH' });
    const other = await post(url, '/v1/chat/completions', { ...body, nvext: { token_data: ids.map((id) => id + 1) } });
    expect(other.code).toBe('KVG_ERR_TOKEN_DATA_MISMATCH');
    expect(await metric(url, 'kvgate_http_rejections_total', { code: 'KVG_ERR_TOKEN_DATA_MISMATCH' })).toBe(2);

    await hang(true);
    try {
      const answer = post(url, '/v1/chat/completions', { ...body, nvext: { token_data: ids } });
      await until(async () => (await booked()).requests === 1, 'the chat booked', 20_000);
      const load = await booked();
      await hang(false);
      const done = await answer;
      expect(done.status).toBe(200);
      expect(done.promptTokens).toBe(ids.length);
      expect(load.prefillTokens).toBe(ids.length);
    } finally {
      await hang(false);
    }
  });
});
