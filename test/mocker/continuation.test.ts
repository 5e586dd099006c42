/**
 * The mocker's generated tokens are a pure function of the context (prompt and
 * tokens so far) and the seed, and it reports them as vLLM >= 0.10.2 does with
 * `return_token_ids` (issue 14, the mocker part of item 1): a request resumed on
 * another engine with its prompt followed by the tokens already generated goes
 * on exactly as the uninterrupted one.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startMocker, type MockerHandle } from '../../src/mocker/index.js';
import { postJson, readSse } from './helpers.js';

let a: MockerHandle;
let b: MockerHandle;

beforeAll(async () => {
  // Two engines that differ in everything but the model (and its default seed): another hash seed, another load.
  a = await startMocker({ speedup: 100, engineHashSeed: 1n, kvEvents: false });
  b = await startMocker({ speedup: 100, engineHashSeed: 2n, kvEvents: false });
});

afterAll(async () => {
  await Promise.all([a.close(), b.close()]);
});

describe('continuation', () => {
  it('a prompt plus the first k generated tokens continues with the same tokens on another engine', async () => {
    const prompt = [11, 12, 13, 14, 15, 16, 17, 18, 19, 20];
    const whole = await postJson(`${a.url}/v1/completions`, { prompt, max_tokens: 24, return_token_ids: true });
    expect(whole.status).toBe(200);
    const ids = whole.json.choices[0].token_ids as number[];
    expect(ids).toHaveLength(24);
    expect(whole.json.choices[0].prompt_token_ids).toEqual(prompt);
    // Some load on b first: the answer must not depend on request order or engine state.
    await postJson(`${b.url}/v1/completions`, { prompt: [5, 6, 7], max_tokens: 5 });
    const rest = await postJson(`${b.url}/v1/completions`, {
      prompt: [...prompt, ...ids.slice(0, 9)],
      max_tokens: 15,
      return_token_ids: true,
    });
    expect(rest.json.choices[0].token_ids).toEqual(ids.slice(9));
    const text = whole.json.choices[0].text as string;
    const first = await postJson(`${b.url}/v1/completions`, { prompt, max_tokens: 9 });
    expect(`${first.json.choices[0].text}${rest.json.choices[0].text}`).toBe(text);
  });

  it('a chat stream with return_token_ids: prompt_token_ids on the first chunk, token_ids on every token chunk', async () => {
    const res = await fetch(`${a.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        messages: [{ role: 'user', content: 'hi there' }],
        max_tokens: 6,
        stream: true,
        return_token_ids: true,
      }),
    });
    const chunks = (await readSse(res)).filter((d) => d !== '[DONE]').map((d) => JSON.parse(d));
    expect(Array.isArray(chunks[0].prompt_token_ids)).toBe(true);
    expect(chunks.slice(1).every((c) => c.prompt_token_ids === undefined)).toBe(true);
    const ids = chunks.flatMap((c) => c.choices[0].token_ids as number[]);
    expect(ids).toHaveLength(6);
    // The chat's templated prompt continued as a completion gives the chat's next tokens.
    const rest = await postJson(`${b.url}/v1/completions`, {
      prompt: [...chunks[0].prompt_token_ids, ...ids.slice(0, 2)],
      max_tokens: 4,
      return_token_ids: true,
    });
    expect(rest.json.choices[0].token_ids).toEqual(ids.slice(2));
  });

  it('without return_token_ids no token ids are sent', async () => {
    const whole = await postJson(`${a.url}/v1/completions`, { prompt: [1, 2, 3], max_tokens: 3 });
    expect(whole.json.choices[0].token_ids).toBeUndefined();
    expect(whole.json.choices[0].prompt_token_ids).toBeUndefined();
  });
});
