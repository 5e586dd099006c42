/**
 * A request over the context length, refused by the mocker in the words and the body of the engine it imitates
 * (src/mocker/context-refusal.ts): vLLM's renderer message with `param: "input_tokens"` in its `{"error": {...}}`
 * object, SGLang's two messages in its flat error object, each at the engine's own boundary (vLLM refuses a prompt
 * and `max_tokens` over the context, SGLang one that reaches it), streamed or not, chat or completion.
 *
 * Before the fix the param was `messages` (or `prompt`) and the SGLang mode answered in vLLM's words and shape.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startMocker, type MockerHandle } from '../../src/mocker/index.js';
import { postJson } from './helpers.js';

const CONTEXT = 256;
const ids = (n: number): number[] => Array.from({ length: n }, (_, i) => 1 + i);

let vllm: MockerHandle;
let sglang: MockerHandle;

beforeAll(async () => {
  const common = { speedup: 50, maxModelLen: CONTEXT, engineHashSeed: 1n, kvEvents: false } as const;
  [vllm, sglang] = await Promise.all([startMocker(common), startMocker({ ...common, engine: 'sglang' })]);
});
afterAll(async () => {
  await Promise.all([vllm?.close(), sglang?.close()]);
});

/** A completion of `prompt` token ids asking `maxTokens`, streamed or not. */
const complete = (m: MockerHandle, prompt: number, maxTokens: number, stream = false) =>
  postJson(`${m.url}/v1/completions`, { prompt: ids(prompt), max_tokens: maxTokens, stream });

describe("vLLM's refusal", () => {
  const said = (prompt: number, maxTokens: number): string =>
    `You passed ${prompt} input tokens and requested ${maxTokens} output tokens. However, the model's context ` +
    `length is only ${CONTEXT} tokens, resulting in a maximum input length of ${CONTEXT - maxTokens} tokens. ` +
    `Please reduce the length of the input prompt. (parameter=input_tokens, value=${prompt})`;

  for (const stream of [false, true]) {
    it(`a prompt over the context and one leaving no room for max_tokens (stream: ${stream})`, async () => {
      for (const [prompt, maxTokens] of [
        [300, 1],
        [200, 100],
      ] as const) {
        const r = await complete(vllm, prompt, maxTokens, stream);
        expect(r.status).toBe(400);
        expect(r.json).toEqual({
          error: { message: said(prompt, maxTokens), type: 'BadRequestError', param: 'input_tokens', code: 400 },
        });
      }
    });
  }

  it('a chat request names input_tokens too, not messages', async () => {
    const r = await postJson(`${vllm.url}/v1/chat/completions`, {
      messages: [{ role: 'user', content: 'hi' }],
      max_tokens: 250,
    });
    expect(r.status).toBe(400);
    expect(r.json.error).toMatchObject({ type: 'BadRequestError', param: 'input_tokens', code: 400 });
    expect(r.json.error.message).toMatch(/^You passed \d+ input tokens and requested 250 output tokens\. /);
  });

  it('a prompt and max_tokens that fill the context exactly are served', async () => {
    expect((await complete(vllm, 200, 56)).status).toBe(200);
  });
});

describe("SGLang's refusal", () => {
  const flat = (message: string) => ({ object: 'error', message, type: 'BadRequestError', param: null, code: 400 });

  for (const stream of [false, true]) {
    it(`a prompt of the context length or more (stream: ${stream})`, async () => {
      for (const prompt of [300, CONTEXT]) {
        const r = await complete(sglang, prompt, 1, stream);
        expect(r.status).toBe(400);
        expect(r.json).toEqual(
          flat(`The input (${prompt} tokens) is longer than the model's context length (${CONTEXT} tokens).`),
        );
      }
    });
  }

  it('a prompt whose tokens and max_tokens reach the context, the exact fill included', async () => {
    for (const [prompt, maxTokens] of [
      [200, 100],
      [200, 56],
    ] as const) {
      const r = await complete(sglang, prompt, maxTokens);
      expect(r.status).toBe(400);
      expect(r.json).toEqual(
        flat(
          `Requested token count exceeds the model's maximum context length of ${CONTEXT} tokens. You requested a ` +
            `total of ${prompt + maxTokens} tokens: ${prompt} tokens from the input messages and ${maxTokens} tokens ` +
            'for the completion. Please reduce the number of tokens in the input messages or the completion to fit ' +
            'within the limit.',
        ),
      );
    }
  });

  it('one token short of the context is served', async () => {
    expect((await complete(sglang, 200, 55)).status).toBe(200);
  });
});
