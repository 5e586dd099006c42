/**
 * A prompt of token ids with an id outside the model's vocabulary is refused
 * as vLLM refuses it ("out of vocabulary"): 400 KVG_ERR_INVALID_TOKEN naming
 * the field and the position, on the main thread (a small body) and on a pool
 * thread (a large one), never routed to an engine that would refuse it after
 * the gateway booked its blocks. A model without its own tokenizer has no
 * vocabulary to check against: its ids are only hashed, as before.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ModelPreprocessor } from '../../src/frontend/preprocess/model-preprocessor.js';
import { FakeRouter } from './fake-router.js';
import { largeBodyConfig, post, startPoolGateway, type PoolGateway } from './server-harness.js';

/** The demo (Qwen3) tokenizer's ids, added tokens included. */
const VOCAB = 151_669;

let g: PoolGateway;
beforeAll(async () => {
  g = await startPoolGateway(largeBodyConfig(), new FakeRouter({ model: 'demo', workerIds: [1] }), { threads: 1 });
});
afterAll(async () => {
  await g.close();
});

/** `n` ids in the vocabulary, with `bad` at `at`. */
function ids(n: number, at: number, bad: number): number[] {
  return Array.from({ length: n }, (_, i) => (i === at ? bad : 1 + (i % 1000)));
}

describe('token ids outside the vocabulary', () => {
  for (const [size, n, at] of [
    ['a small body', 8, 5],
    ['a large body (a pool thread)', 10_000, 5000],
  ] as const) {
    it(`in a completion's prompt: 400 KVG_ERR_INVALID_TOKEN, param prompt (${size})`, async () => {
      const r = await post(`${g.url}/v1/completions`, { model: 'demo', prompt: ids(n, at, VOCAB) });
      expect(r.status).toBe(400);
      expect(r.json.error).toMatchObject({ code: 'KVG_ERR_INVALID_TOKEN', param: 'prompt' });
      expect(r.json.error.message).toContain(`token ${at} is ${VOCAB}`);
      const ok = await post(`${g.url}/v1/completions`, { model: 'demo', prompt: ids(n, at, VOCAB - 1) });
      expect(ok.status).toBe(200);
    });
  }

  it("in a completion's nvext.token_data: param nvext.token_data", async () => {
    const body = { model: 'demo', prompt: 'hello', nvext: { token_data: ids(8, 3, 4_000_000) } };
    const r = await post(`${g.url}/v1/completions`, body);
    expect(r.status).toBe(400);
    expect(r.json.error).toMatchObject({ code: 'KVG_ERR_INVALID_TOKEN', param: 'nvext.token_data' });
  });

  it('are only hashed for a model without a tokenizer of its own', async () => {
    const m = await ModelPreprocessor.create({
      name: 'approx',
      blockSize: 4,
      tokenizer: { kind: 'none', onMissing: 'approximate' },
      segmentCacheTokens: 0,
      segmentCacheBytes: 0,
    });
    const r = await m.run({
      kind: 'tokens',
      model: 'approx',
      maxPromptTokens: 100,
      tokenIds: Uint32Array.from(ids(8, 3, 4_000_000)),
    });
    expect(r.promptTokens).toBe(8);
  });
});
