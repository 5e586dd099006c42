/**
 * The mocker's `/v1/responses` answers as vLLM's Responses front end writes them, read by the official `openai`
 * client over a real socket: a response is `incomplete` (`incomplete_details.reason: max_output_tokens`) only where
 * max_output_tokens cut the answer; a function call ends its answer, so its response is `completed`, streamed or not.
 *
 * Before the fix every finished function-call response was `incomplete` with `incomplete_details` null.
 *
 * Responses tools without a name (Codex's `local_shell`, `web_search`) are taken, as vLLM passes them to the chat
 * template, and never called: the simulated model calls the function tool among them. Before the fix the mocker
 * refused them ("tools[0] must be a function tool with a name"); chat completions still refuse such a tool, as
 * vLLM does.
 */
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startMocker, type MockerHandle } from '../../src/mocker/index.js';
import { postJson } from './helpers.js';

const MODEL = 'mock-model';
const shell: OpenAI.Responses.FunctionTool = {
  type: 'function',
  name: 'shell',
  description: 'Run a command.',
  parameters: { type: 'object', properties: { cmd: { type: 'array', items: { type: 'string' } } } },
  strict: false,
};

let m: MockerHandle;
let openai: OpenAI;

beforeAll(async () => {
  m = await startMocker({ speedup: 1000, kvEvents: false, tokenizer: 'demo' });
  openai = new OpenAI({ baseURL: `${m.url}/v1`, apiKey: 'unused', maxRetries: 0 });
});
afterAll(async () => {
  await m.close();
});

/** The finished response, asked unstreamed and streamed (its `response.completed` event). */
async function bothWays(
  params: OpenAI.Responses.ResponseCreateParamsNonStreaming,
): Promise<OpenAI.Responses.Response[]> {
  const whole = await openai.responses.create(params);
  let streamed: OpenAI.Responses.Response | undefined;
  for await (const ev of await openai.responses.create({ ...params, stream: true })) {
    if (ev.type === 'response.completed') streamed = ev.response;
  }
  return [whole, streamed!];
}

describe("the mocker's Responses status, as vLLM sets it", () => {
  it('a function call is completed, with no incomplete details', async () => {
    for (const r of await bothWays({ model: MODEL, input: 'List the files.', tools: [shell], max_output_tokens: 8 })) {
      expect(r.output[0]?.type).toBe('function_call');
      expect(r.status).toBe('completed');
      expect(r.incomplete_details).toBeNull();
    }
  });

  it('a text answer cut by max_output_tokens is incomplete, for that reason', async () => {
    for (const r of await bothWays({ model: MODEL, input: 'Tell a story.', max_output_tokens: 5 })) {
      expect(r.output[0]?.type).toBe('message');
      expect(r.usage?.output_tokens).toBe(5);
      expect(r.status).toBe('incomplete');
      expect(r.incomplete_details).toEqual({ reason: 'max_output_tokens' });
    }
  });
});

describe('Responses tools without a name', () => {
  const nameless: OpenAI.Responses.Tool[] = [{ type: 'local_shell' }, { type: 'web_search' }];

  it('are taken and never called: the function tool among them is, streamed or not', async () => {
    for (const r of await bothWays({ model: MODEL, input: 'List the files.', tools: [...nameless, shell] })) {
      expect(r.output[0]).toMatchObject({ type: 'function_call', name: 'shell' });
    }
  });

  it('alone, are taken and the answer is text', async () => {
    const r = await openai.responses.create({ model: MODEL, input: 'Hi.', tools: nameless, max_output_tokens: 4 });
    expect(r.output[0]?.type).toBe('message');
    expect(r.output_text.length).toBeGreaterThan(0);
  });

  it('are still refused by chat completions, as vLLM refuses them', async () => {
    const chat = await postJson(`${m.url}/v1/chat/completions`, {
      model: MODEL,
      messages: [{ role: 'user', content: 'Hi.' }],
      tools: [{ type: 'function', function: { type: 'local_shell' } }],
    });
    expect(chat.status).toBe(400);
    expect(chat.json.error.param).toBe('tools');
  });
});
