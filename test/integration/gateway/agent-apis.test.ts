/**
 * Issue 27: the APIs coding agents speak, through `kvgate serve` in front of two `kvgate mocker` engines (real
 * processes, real sockets, KV events), read by the official Node clients: Anthropic's Messages API
 * (`@anthropic-ai/sdk`: streaming and not, tools, a tool-result turn) and OpenAI's Responses API (`openai`:
 * streaming and not, function tools and a function-call-output turn). A follow-up turn goes to the worker that
 * holds the conversation's prefix, and the engine reports the cached tokens. Bad input is answered in the API's
 * own error shape with a stable code; a disaggregated model refuses both APIs. The gateway checks API keys: the Anthropic client sends its key as
 * `x-api-key`, the OpenAI client as `Authorization: Bearer`.
 */
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startMockerCli, startServeCli, type MockerLine } from '../../helpers/cli-process.js';
import { metric } from '../../helpers/metric-sum.js';
import { postChat, serveConfig, startMockerSuite, workerEntry, type MockerSuite } from '../../helpers/serve-suite.js';
import { until } from '../../helpers/until.js';

const MODEL = 'mock-model';
const FAST = ['--speedup', '100', '--tokenizer', 'demo'];
const KEY = 'sk-kvgate-test-27';

const lsTool = {
  name: 'ls',
  description: 'List the files of a directory.',
  input_schema: { type: 'object' as const, properties: { path: { type: 'string' } }, required: ['path'] },
};
const SYSTEM = [
  { type: 'text' as const, text: 'x-anthropic-billing-header: cc_version=2.1.200; cch=1f2e3;' },
  { type: 'text' as const, text: 'You are a coding agent working in a small repository. ' },
  { type: 'text' as const, text: 'Answer tersely and use the tools you are given.' },
];

describe('agent APIs through kvgate serve (issue 27)', () => {
  let suite: MockerSuite;
  let url: string;
  let anthropic: Anthropic;
  let openai: OpenAI;

  beforeAll(async () => {
    suite = await startMockerSuite('agent-apis', FAST, 2);
    const workers = suite.engines.map((e, i) => workerEntry(i + 1, e));
    const top = ['admin: { enabled: true }', 'preprocess: { threads: 0 }', `auth: { api_keys: ["${KEY}"] }`];
    const file = suite.write('serve.yaml', serveConfig(MODEL, ['workers:', ...workers.map((w) => `  - ${w}`)], top));
    const served = await startServeCli(file);
    suite.procs.push(served.proc);
    url = served.url;
    anthropic = new Anthropic({ baseURL: url, apiKey: KEY, maxRetries: 0 });
    openai = new OpenAI({ baseURL: `${url}/v1`, apiKey: KEY, maxRetries: 0 });
  });

  afterAll(async () => {
    await suite?.stop();
  });

  it('Messages: a tool call unstreamed, then the tool-result turn streamed on the worker holding the prefix', async () => {
    const question = { role: 'user' as const, content: 'Which files are in the current directory? (conversation A)' };
    const first = await anthropic.messages
      .create({ model: MODEL, max_tokens: 8, system: SYSTEM, tools: [lsTool], messages: [question] })
      .withResponse();
    const msg = first.data;
    expect(msg.type).toBe('message');
    expect(msg.role).toBe('assistant');
    expect(msg.stop_reason).toBe('tool_use');
    const call = msg.content[0]!;
    expect(call.type).toBe('tool_use');
    if (call.type !== 'tool_use') return;
    expect(call.name).toBe('ls');
    expect(msg.usage.output_tokens).toBe(8);
    expect(msg.usage.input_tokens).toBeGreaterThan(16);
    const worker = first.response.headers.get('x-kvgate-worker');
    expect(worker).not.toBeNull();

    const stream = anthropic.messages.stream({
      model: MODEL,
      max_tokens: 6,
      system: SYSTEM,
      tools: [lsTool],
      messages: [
        question,
        { role: 'assistant', content: msg.content },
        {
          role: 'user',
          content: [
            { type: 'tool_result', tool_use_id: call.id, content: [{ type: 'text', text: 'a.py\nb.py' }] },
            { type: 'text', text: 'Open the first one.' },
          ],
        },
      ],
    });
    const types: string[] = [];
    stream.on('streamEvent', (ev) => types.push(ev.type));
    const { response } = await stream.withResponse();
    const final = await stream.finalMessage();
    expect(response.headers.get('x-kvgate-worker')).toBe(worker);
    expect(types[0]).toBe('message_start');
    expect(types.at(-1)).toBe('message_stop');
    expect(types).toContain('content_block_delta');
    expect(final.content[0]!.type).toBe('tool_use');
    expect(final.usage.output_tokens).toBe(6);
    // The first turn's prompt blocks were read from the engine's cache.
    expect(final.usage.cache_read_input_tokens).toBeGreaterThanOrEqual(16);
    expect(await metric(url, 'kvgate_http_requests_total', { route: '/v1/messages', status: '200' })).toBe(2);
  });

  it("Messages: Claude Code's system messages inside messages are taken, and the next turn reads the first from cache", async () => {
    // Claude Code 2.1.154 and later: a system message after the user's turn, a ctx message, every turn.
    const agents = `Available agent types for the Agent tool: ${'general-purpose, explore, plan; '.repeat(12)}`;
    const turn1 = [
      { role: 'user', content: 'Which files are in the current directory? (conversation C)' },
      { role: 'ctx', content: 'git status: clean' },
      { role: 'system', content: agents },
    ];
    const post = async (messages: unknown[]) => {
      const res = await fetch(`${url}/v1/messages`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-api-key': KEY },
        body: JSON.stringify({ model: MODEL, max_tokens: 4, system: SYSTEM, messages }),
      });
      const body = (await res.json()) as {
        content: { type: string; text?: string }[];
        usage: { input_tokens: number; cache_read_input_tokens?: number };
      };
      return { status: res.status, worker: res.headers.get('x-kvgate-worker'), body };
    };
    const first = await post(turn1);
    expect(first.status).toBe(200);
    const answer = first.body.content.map((b) => b.text ?? '').join('');
    const second = await post([
      ...turn1,
      { role: 'assistant', content: answer },
      { role: 'user', content: 'Open the first one.' },
      { role: 'system', content: 'Reminder: be terse.' },
    ]);
    expect(second.status).toBe(200);
    expect(second.worker).toBe(first.worker);
    // Placed alike by gateway and engine, the whole first prompt (but its last partial block) was cached.
    expect(second.body.usage.cache_read_input_tokens).toBeGreaterThanOrEqual(first.body.usage.input_tokens - 16);
  });

  it('Messages: text answers streaming and not', async () => {
    const body = {
      model: MODEL,
      max_tokens: 5,
      system: 'You are terse.',
      messages: [{ role: 'user' as const, content: 'Say hello.' }],
    };
    const whole = await anthropic.messages.create(body);
    expect(whole.content).toHaveLength(1);
    expect(whole.content[0]!.type).toBe('text');
    expect(whole.stop_reason).toBe('max_tokens');
    const streamed = await anthropic.messages.stream(body).finalMessage();
    // The same seed and prompt: the stream's pieces merge into the unstreamed answer.
    expect(streamed.content).toEqual(whole.content);
    expect(streamed.usage.output_tokens).toBe(5);
  });

  it('Responses: text unstreamed and streamed, then a function-call turn on the worker holding the prefix', async () => {
    const instructions = 'You are Codex, a coding agent in a small repository. Use the shell tool to look around.';
    const whole = await openai.responses.create({
      model: MODEL,
      instructions,
      input: 'Say hello.',
      max_output_tokens: 5,
    });
    expect(whole.object).toBe('response');
    expect(whole.output_text.length).toBeGreaterThan(0);
    expect(whole.usage?.output_tokens).toBe(5);

    const stream = await openai.responses.create({
      model: MODEL,
      instructions,
      input: 'Say hello.',
      max_output_tokens: 5,
      stream: true,
    });
    const types: string[] = [];
    let text = '';
    let completed: OpenAI.Responses.Response | undefined;
    for await (const ev of stream) {
      types.push(ev.type);
      if (ev.type === 'response.output_text.delta') text += ev.delta;
      if (ev.type === 'response.completed') completed = ev.response;
    }
    expect(types[0]).toBe('response.created');
    expect(types.at(-1)).toBe('response.completed');
    expect(text).toBe(whole.output_text);
    expect(completed?.usage?.output_tokens).toBe(5);
    // reasoning.effort reaches the template as vLLM passes it: "none" is enable_thinking false, which the demo
    // (Qwen3) template renders as a closed, empty think block.
    const none = await openai.responses.create({
      model: MODEL,
      instructions,
      input: 'Say hello.',
      max_output_tokens: 5,
      reasoning: { effort: 'none' },
    });
    expect(none.usage!.input_tokens).toBeGreaterThan(whole.usage!.input_tokens);

    const shell = {
      type: 'function' as const,
      name: 'shell',
      description: 'Run a command.',
      parameters: { type: 'object', properties: { cmd: { type: 'array', items: { type: 'string' } } } },
      strict: false,
    };
    const user = { role: 'user' as const, content: 'List the repository files, please (conversation B).' };
    const first = await openai.responses
      .create({ model: MODEL, instructions, input: [user], tools: [shell], max_output_tokens: 6 })
      .withResponse();
    const call = first.data.output[0]!;
    expect(call.type).toBe('function_call');
    if (call.type !== 'function_call') return;
    const worker = first.response.headers.get('x-kvgate-worker');
    const next = await openai.responses
      .create({
        model: MODEL,
        instructions,
        tools: [shell],
        max_output_tokens: 4,
        input: [user, call, { type: 'function_call_output', call_id: call.call_id, output: 'a.py\nb.py' }],
      })
      .withResponse();
    expect(next.response.headers.get('x-kvgate-worker')).toBe(worker);
    expect(next.data.usage?.input_tokens_details.cached_tokens).toBeGreaterThanOrEqual(16);
  });

  it("bad input: each API's own error shape with a stable code", async () => {
    const post = async (
      path: string,
      body: unknown,
      key: Record<string, string> = { authorization: `Bearer ${KEY}` },
    ): Promise<{ status: number; json: Record<string, unknown> }> => {
      const res = await fetch(`${url}${path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...key },
        body: JSON.stringify(body),
      });
      return { status: res.status, json: (await res.json()) as Record<string, unknown> };
    };
    const noMax = await post('/v1/messages', { model: MODEL, messages: [{ role: 'user', content: 'x' }] });
    expect(noMax.status).toBe(400);
    expect(noMax.json).toMatchObject({
      type: 'error',
      error: { type: 'invalid_request_error', code: 'KVG_ERR_INVALID_REQUEST', param: 'max_tokens' },
    });
    const unknownBlock = await post('/v1/messages', {
      model: MODEL,
      max_tokens: 4,
      messages: [{ role: 'user', content: [{ type: 'video', source: {} }] }],
    });
    expect(unknownBlock.json).toMatchObject({
      type: 'error',
      error: { code: 'KVG_ERR_INVALID_CONTENT_BLOCK', param: 'messages[0].content[0].type' },
    });
    // A PDF Claude Code reads comes as a document block: refused as not text, as an image is, streamed or counted.
    const pdf = { type: 'base64' as const, media_type: 'application/pdf' as const, data: 'JVBERi0xLjQK' };
    const withPdf = [
      {
        role: 'user' as const,
        content: [
          { type: 'text' as const, text: 'Summarize it.' },
          { type: 'document' as const, source: pdf },
        ],
      },
    ];
    for (const refused of [
      () => anthropic.messages.stream({ model: MODEL, max_tokens: 4, messages: withPdf }).finalMessage(),
      () => anthropic.messages.countTokens({ model: MODEL, messages: withPdf }),
    ]) {
      const e = await refused().catch((x: unknown) => x);
      expect(e).toBeInstanceOf(Anthropic.BadRequestError);
      expect((e as InstanceType<typeof Anthropic.BadRequestError>).error).toMatchObject({
        type: 'error',
        error: {
          type: 'invalid_request_error',
          code: 'KVG_ERR_UNSUPPORTED_CONTENT',
          param: 'messages[0].content[1].type',
          message: 'messages[0].content[1].type is "document"; kvgate routes text-only conversations',
        },
      });
    }
    const wrongKey = await post(
      '/v1/messages',
      { model: MODEL, max_tokens: 4, messages: [] },
      { 'x-api-key': 'wrong' },
    );
    expect(wrongKey.status).toBe(401);
    expect(wrongKey.json).toMatchObject({ type: 'error', error: { type: 'authentication_error' } });
    const unknownModel = await post('/v1/messages', { model: 'nope', max_tokens: 4, messages: [] });
    expect(unknownModel.status).toBe(404);
    expect(unknownModel.json).toMatchObject({ type: 'error', error: { type: 'not_found_error' } });
    // The SDK reads the error shape.
    const err = await anthropic.messages
      .create({ model: MODEL, max_tokens: 4, messages: [{ role: 'user', content: [{ type: 'text' } as never] }] })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Anthropic.BadRequestError);
    expect((err as InstanceType<typeof Anthropic.BadRequestError>).error).toMatchObject({
      type: 'error',
      error: { type: 'invalid_request_error', code: 'KVG_ERR_INVALID_CONTENT_BLOCK' },
    });

    const previous = await openai.responses
      .create({ model: MODEL, input: 'more', previous_response_id: 'resp_1' })
      .catch((e: unknown) => e);
    expect(previous).toBeInstanceOf(OpenAI.BadRequestError);
    expect((previous as InstanceType<typeof OpenAI.BadRequestError>).code).toBe(
      'KVG_ERR_PREVIOUS_RESPONSE_UNSUPPORTED',
    );
    // A background response would be queued by an engine and read back from a store kvgate does not serve: refused
    // before it is routed, in a shape the SDK reads; background: false is an ordinary request.
    const background = await openai.responses
      .create({ model: MODEL, input: 'more', background: true })
      .catch((e: unknown) => e);
    expect(background).toBeInstanceOf(OpenAI.BadRequestError);
    expect(background).toMatchObject({
      status: 400,
      code: 'KVG_ERR_BACKGROUND_UNSUPPORTED',
      param: 'background',
      type: 'invalid_request_error',
    });
    const foreground = await openai.responses.create({
      model: MODEL,
      input: 'more',
      background: false,
      max_output_tokens: 4,
    });
    expect(foreground.status).toMatch(/^(completed|incomplete)$/);
    const badItem = await post('/v1/responses', { model: MODEL, input: [{ type: 'web_search_call', id: 'x' }] });
    expect(badItem.status).toBe(400);
    expect(badItem.json).toMatchObject({ error: { code: 'KVG_ERR_INVALID_CONTENT_BLOCK', param: 'input[0].type' } });
  });
});

describe('agent APIs on a disaggregated model (issue 27)', () => {
  let suite: MockerSuite;
  let url: string;

  beforeAll(async () => {
    suite = await startMockerSuite(
      'agent-apis-pd',
      [...FAST, '--engine', 'sglang', '--mode', 'prefill', '--bootstrap-port', '0'],
      1,
    );
    const d = await startMockerCli([...FAST, '--engine', 'sglang', '--mode', 'decode'], 1);
    suite.procs.push(d.proc);
    const p = suite.engines[0]! as MockerLine & { bootstrap_port: number };
    const workers = [
      `{ id: 1, role: prefill, url: "${p.url}", bootstrap_port: ${p.bootstrap_port}, kv_events: "${p.kv_events[0]}" }`,
      `{ id: 2, role: decode, url: "${d.engines[0]!.url}", kv_events: "${d.engines[0]!.kv_events[0]}" }`,
    ];
    const file = suite.write(
      'pd.yaml',
      serveConfig(MODEL, ['engine: sglang', 'workers:', ...workers.map((w) => `  - ${w}`)]),
    );
    const served = await startServeCli(file);
    suite.procs.push(served.proc);
    url = served.url;
  });

  afterAll(async () => {
    await suite?.stop();
  });

  it('refuses Messages and Responses with a clear error in each API shape while chat runs disaggregated', async () => {
    const chat = { model: MODEL, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 3 };
    // The chat completion runs through the prefill worker once the prefill pool is active.
    await until(
      async () => {
        const res = await postChat(url, chat);
        await res.arrayBuffer();
        return res.status === 200 && res.headers.get('x-kvgate-prefill-worker') === '1';
      },
      'a chat completion through the prefill worker',
      20_000,
    );
    const post = (path: string, body: unknown): Promise<Response> =>
      fetch(`${url}${path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
    const messages = await post('/v1/messages', {
      model: MODEL,
      max_tokens: 3,
      messages: [{ role: 'user', content: 'Hi' }],
    });
    expect(messages.status).toBe(400);
    expect(await messages.json()).toMatchObject({
      type: 'error',
      error: { type: 'invalid_request_error', code: 'KVG_ERR_AGENT_API_NOT_DISAGGREGATED', param: 'model' },
    });
    const responses = await post('/v1/responses', { model: MODEL, input: 'Hi', max_output_tokens: 3 });
    expect(responses.status).toBe(400);
    const body = (await responses.json()) as { error: { code: string; message: string } };
    expect(body.error.code).toBe('KVG_ERR_AGENT_API_NOT_DISAGGREGATED');
    expect(body.error.message).toContain('/v1/chat/completions');
  });

  it('refuses embeddings with a clear error while the model runs disaggregated', async () => {
    const res = await fetch(`${url}/v1/embeddings`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, input: 'Hi' }),
    });
    expect(res.status).toBe(400);
    expect(await res.json()).toMatchObject({
      error: { code: 'KVG_ERR_EMBEDDINGS_NOT_DISAGGREGATED', param: 'model' },
    });
  });
});
