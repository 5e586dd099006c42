/**
 * The mocker renders a request's tool schemas as the gateway does (the numbers as vLLM's template writes them:
 * `0.0`, `1.0`, `1e-07`), so its KV events name the blocks the gateway hashed: a Chat Completions body through
 * /tokenize, and a Messages body through its prompt's token count.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startMocker, type MockerHandle } from '../../src/mocker/index.js';
import { loadTokenizer } from '../../src/tokenizer/index.js';
import { PYTHON_TOOLS_PROMPT, TOOL_BODIES } from '../frontend/python-prompts.js';
import { postJson } from './helpers.js';

let m: MockerHandle;
let ids: number[];

beforeAll(async () => {
  m = await startMocker({ model: 'demo', tokenizer: 'demo', speedup: 50, kvEvents: false });
  ids = [...(await loadTokenizer('demo').encode(PYTHON_TOOLS_PROMPT, { addSpecialTokens: false }))];
});
afterAll(async () => {
  await m.close();
});

describe("a tool schema's numbers in the mocker", () => {
  it('tokenize a Chat Completions body as Python renders it', async () => {
    const r = await postJson(`${m.url}/tokenize`, TOOL_BODIES.chat);
    expect(r.status).toBe(200);
    expect(r.json.tokens).toEqual(ids);
  });

  it('count a Messages prompt as Python renders it', async () => {
    const r = await postJson(`${m.url}/v1/messages`, TOOL_BODIES.messages);
    expect(r.status).toBe(200);
    expect(r.json.usage.input_tokens).toBe(ids.length);
  });
});
