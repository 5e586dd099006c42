/**
 * `POST /tokenize`, `POST /detokenize` and `POST /v1/messages/count_tokens`, answered by `kvgate serve` itself with
 * the model's tokenizer (two `kvgate mocker` engines behind it, real processes and sockets). The ids are held to
 * the engine's own: the mocker's `/tokenize` and `/detokenize` for the same bodies, `/v1/route`'s `token_ids` for a
 * chat (routing's rendering), and for count_tokens the `input_tokens` the engine reports for the same Messages
 * request, read through the official Anthropic client. A model configured without a tokenizer refuses with a
 * stable code, in each API's error shape.
 */
import Anthropic from '@anthropic-ai/sdk';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { metric } from '../../helpers/metric-sum.js';
import { startServeCli } from '../../helpers/cli-process.js';
import { startMockerSuite, workerEntry, type MockerSuite } from '../../helpers/serve-suite.js';

const MODEL = 'mock-model';
const PLAIN = 'plain-model';
const KEY = 'sk-kvgate-tokenize';
const MAX_PROMPT = 3000;

const messages = [
  { role: 'system', content: 'You are terse.' },
  { role: 'user', content: 'Count the words in this sentence, please.' },
  { role: 'assistant', content: 'Seven.' },
  { role: 'user', content: 'And in this one?' },
];

describe('tokenize, detokenize and count_tokens through kvgate serve', () => {
  let suite: MockerSuite;
  let url: string;
  let engine: string;

  const post = async (
    path: string,
    body: unknown,
    base = url,
    headers: Record<string, string> = { authorization: `Bearer ${KEY}` },
  ): Promise<{ status: number; json: Record<string, unknown> }> => {
    const res = await fetch(`${base}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body: JSON.stringify(body),
    });
    return { status: res.status, json: (await res.json()) as Record<string, unknown> };
  };

  beforeAll(async () => {
    suite = await startMockerSuite('tokenize', ['--speedup', '100', '--tokenizer', 'demo'], 2);
    engine = suite.engines[0]!.url;
    const file = suite.write(
      'serve.yaml',
      [
        'listen: { port: 0 }',
        'preprocess: { threads: 1 }',
        `auth: { api_keys: ["${KEY}"] }`,
        'models:',
        `  - name: ${MODEL}`,
        '    tokenizer: demo',
        `    max_prompt_tokens: ${MAX_PROMPT}`,
        '    workers:',
        `      - ${workerEntry(1, suite.engines[0]!)}`,
        `  - name: ${PLAIN}`,
        `    served_model_name: ${MODEL}`,
        '    tokenizer: none',
        '    workers:',
        `      - ${workerEntry(2, suite.engines[1]!)}`,
        '',
      ].join('\n'),
    );
    const served = await startServeCli(file);
    suite.procs.push(served.proc);
    url = served.url;
  });

  afterAll(async () => {
    await suite?.stop();
  });

  it('tokenizes a prompt and a chat as the engine does, and as routing renders the chat', async () => {
    const prompt = { model: MODEL, prompt: 'The quick brown fox jumps over the lazy dog.' };
    const mine = await post('/tokenize', prompt);
    expect(mine.status).toBe(200);
    const theirs = await post('/tokenize', prompt, engine, {});
    expect(mine.json.tokens).toEqual(theirs.json.tokens);
    expect(mine.json).toMatchObject({ count: (theirs.json.tokens as number[]).length, max_model_len: MAX_PROMPT });

    const chat = { model: MODEL, messages };
    const tokens = (await post('/tokenize', chat)).json.tokens as number[];
    expect(tokens).toEqual((await post('/tokenize', chat, engine, {})).json.tokens);
    const routed = await post('/v1/route', { ...chat, max_tokens: 4 });
    expect(routed.status).toBe(200);
    expect(routed.json.token_ids).toEqual(tokens);
    // Without the generation prompt the rendering is a strict prefix of the one with it.
    const bare = (await post('/tokenize', { ...chat, add_generation_prompt: false })).json.tokens as number[];
    expect(bare.length).toBeLessThan(tokens.length);
    expect(tokens.slice(0, bare.length)).toEqual(bare);
    expect(await metric(url, 'kvgate_http_requests_total', { route: '/tokenize', status: '200' })).toBe(3);
    // A prompt long enough to be tokenized on a pool thread, and longer than the model's prompt limit: counted all
    // the same (no prompt limit applies to /tokenize, as on vLLM's).
    const long = { model: MODEL, prompt: 'word '.repeat(4000) };
    const counted = await post('/tokenize', long);
    expect(counted.json.count).toBeGreaterThan(MAX_PROMPT);
    expect(counted.json.tokens).toEqual((await post('/tokenize', long, engine, {})).json.tokens);
  });

  it('detokenizes back to the text, special tokens kept, as the engine does', async () => {
    const text = 'Detokenize me: naïve café, 12345.';
    const ids = (await post('/tokenize', { prompt: text, model: MODEL, add_special_tokens: false })).json.tokens;
    const back = await post('/detokenize', { model: MODEL, tokens: ids });
    expect(back).toEqual({ status: 200, json: { prompt: text } });
    const chatIds = (await post('/tokenize', { model: MODEL, messages })).json.tokens;
    const rendered = await post('/detokenize', { model: MODEL, tokens: chatIds });
    expect(rendered.json.prompt).toContain('<|im_start|>user');
    expect(rendered.json).toEqual((await post('/detokenize', { model: MODEL, tokens: chatIds }, engine, {})).json);
  });

  it("counts a Messages request's input tokens as the engine counts them (Anthropic client)", async () => {
    const anthropic = new Anthropic({ baseURL: url, apiKey: KEY, maxRetries: 0 });
    const body = {
      model: MODEL,
      system: 'You are a coding agent.',
      tools: [
        {
          name: 'ls',
          description: 'List a directory.',
          input_schema: { type: 'object' as const, properties: { path: { type: 'string' } } },
        },
      ],
      messages: [{ role: 'user' as const, content: 'Which files are here?' }],
    };
    const counted = await anthropic.messages.countTokens(body);
    const answered = await anthropic.messages.create({ ...body, max_tokens: 3 });
    expect(counted.input_tokens).toBe(answered.usage.input_tokens);
    expect(counted.input_tokens).toBeGreaterThan(20);
  });

  it('refuses bad input and a model without a tokenizer with stable codes', async () => {
    const noTok = await post('/tokenize', { model: PLAIN, prompt: 'hi' });
    expect(noTok.status).toBe(400);
    expect(noTok.json).toMatchObject({ error: { code: 'KVG_ERR_TOKENIZER_UNAVAILABLE', param: 'model' } });
    const noTokDecode = await post('/detokenize', { model: PLAIN, tokens: [1, 2] });
    expect(noTokDecode.json).toMatchObject({ error: { code: 'KVG_ERR_TOKENIZER_UNAVAILABLE' } });
    const noTokCount = await post(
      '/v1/messages/count_tokens',
      { model: PLAIN, messages: [{ role: 'user', content: 'hi' }] },
      url,
      { 'x-api-key': KEY },
    );
    expect(noTokCount.status).toBe(400);
    expect(noTokCount.json).toMatchObject({
      type: 'error',
      error: { type: 'invalid_request_error', code: 'KVG_ERR_TOKENIZER_UNAVAILABLE' },
    });

    const noPrompt = await post('/tokenize', { model: MODEL });
    expect(noPrompt.json).toMatchObject({ error: { code: 'KVG_ERR_INVALID_REQUEST', param: 'prompt' } });
    const badBlock = await post('/v1/messages/count_tokens', {
      model: MODEL,
      messages: [{ role: 'user', content: [{ type: 'video', source: {} }] }],
    });
    expect(badBlock.json).toMatchObject({ type: 'error', error: { code: 'KVG_ERR_INVALID_CONTENT_BLOCK' } });
    const outside = await post('/detokenize', { model: MODEL, tokens: [1, 4_000_000] });
    expect(outside.json).toMatchObject({ error: { code: 'KVG_ERR_INVALID_TOKEN', param: 'tokens[1]' } });
    const negative = await post('/detokenize', { model: MODEL, tokens: [-1] });
    expect(negative.json).toMatchObject({ error: { code: 'KVG_ERR_INVALID_REQUEST', param: 'tokens[0]' } });
    // Two models served: `model` is required.
    const which = await post('/tokenize', { prompt: 'hi' });
    expect(which.json).toMatchObject({ error: { code: 'KVG_ERR_INVALID_REQUEST', param: 'model' } });
    const unknown = await post('/tokenize', { model: 'nope', prompt: 'hi' });
    expect(unknown.status).toBe(404);
    const noKey = await post('/tokenize', { model: MODEL, prompt: 'hi' }, url, {});
    expect(noKey.status).toBe(401);
  });
});
