/**
 * Issue 12 item 1: every engine leg streams, and a client that asked for
 * `stream: false` gets the answer assembled from the stream. The assembled
 * answer must equal, field by field, the engine's own non-streaming answer to
 * the same request (the mocker is deterministic: same seed, same prompt), for
 * chat with a tool call and logprobs and for completions with logprobs.
 *
 * Null and absent are the same to an OpenAI client (vLLM writes
 * `refusal: null`, `audio: null`, `tool_calls: []`, ... that no chunk carries),
 * so both sides are compared without null members and empty tool-call lists.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ResponseAssembler } from '../../../src/engines/index.js';
import { startFleet, prepare, type Fleet } from '../../helpers/fleet.js';

type Json = Record<string, unknown>;

/** Drops null members and empty `tool_calls` lists, recursively. */
function normalized(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(normalized);
  if (typeof v !== 'object' || v === null) return v;
  const out: Json = {};
  for (const [k, x] of Object.entries(v)) {
    if (x === null || (k === 'tool_calls' && Array.isArray(x) && x.length === 0)) continue;
    out[k] = normalized(x);
  }
  return out;
}

/** Both sides compute the prompt from scratch (the same cached-token count in their usage). */
async function resetCache(url: string): Promise<void> {
  expect((await fetch(`${url}/reset_prefix_cache`, { method: 'POST' })).status).toBe(200);
}

async function post(url: string, path: string, body: Json, requestId: string): Promise<Response> {
  await resetCache(url);
  return fetch(`${url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-request-id': requestId },
    body: JSON.stringify(body),
  });
}

/** The engine's stream, assembled; and the chunks' own id/created. */
async function assembledStream(url: string, path: string, body: Json, requestId: string): Promise<Json> {
  const res = await post(url, path, { ...body, stream: true, stream_options: { include_usage: true } }, requestId);
  expect(res.status).toBe(200);
  const asm = new ResponseAssembler();
  for (const ev of (await res.text()).split('\n\n')) {
    if (!ev.startsWith('data: ') || ev === 'data: [DONE]') continue;
    asm.push(JSON.parse(ev.slice(6)));
  }
  return asm.result();
}

const CHAT: Json = {
  model: 'mock-model',
  max_tokens: 12,
  seed: 42,
  logprobs: true,
  top_logprobs: 3,
  messages: [{ role: 'user', content: 'What is the weather in Paris, and what time is it there?' }],
  tools: [
    {
      type: 'function',
      function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } },
    },
    { type: 'function', function: { name: 'get_time', parameters: { type: 'object' } } },
  ],
  tool_choice: 'auto',
};
const COMPLETION: Json = {
  model: 'mock-model',
  max_tokens: 10,
  seed: 7,
  logprobs: 4,
  prompt: 'Once upon a time, in a cache far away,',
};

describe("non-streaming answers assembled from the stream equal the engine's own", () => {
  let f: Fleet;
  let engineUrl: string;

  beforeAll(async () => {
    f = await startFleet(1, { kvEvents: false });
    engineUrl = f.mockers[0]!.url;
  });
  afterAll(async () => {
    await f?.close();
  });

  for (const [name, path, body] of [
    ['chat with a tool call and logprobs', '/v1/chat/completions', CHAT],
    ['completions with logprobs', '/v1/completions', COMPLETION],
  ] as const) {
    it(`${name}: the assembled stream equals the engine's unstreamed answer field by field`, async () => {
      const direct = (await (await post(engineUrl, path, { ...body, stream: false }, `same-${name}`)).json()) as Json;
      const assembled = await assembledStream(engineUrl, path, body, `same-${name}`);
      // The generation is not trivial: a tool call (chat) and per-token logprobs with alternatives.
      const choice = (direct['choices'] as Json[])[0]!;
      if (path === '/v1/chat/completions') {
        expect(((choice['message'] as Json)['tool_calls'] as unknown[]).length).toBe(1);
        expect(choice['finish_reason']).toBe('tool_calls');
        expect(((choice['logprobs'] as Json)['content'] as unknown[]).length).toBe(12);
      } else {
        expect(((choice['logprobs'] as Json)['tokens'] as unknown[]).length).toBe(10);
      }
      expect(Math.abs((assembled['created'] as number) - (direct['created'] as number))).toBeLessThanOrEqual(1);
      expect(normalized({ ...assembled, created: 0 })).toEqual(normalized({ ...direct, created: 0 }));
    });

    it(`${name}: through the router, a non-streaming client gets the same answer (the engine leg streamed)`, async () => {
      const direct = (await (await post(engineUrl, path, { ...body, stream: false }, 'direct')).json()) as Json;
      const req = prepare([1, 2, 3], { stream: false });
      await resetCache(engineUrl);
      const routed = await f.router.route({
        ...req,
        endpoint: path === '/v1/completions' ? 'completion' : 'chat',
        body: { ...body, stream: false },
      });
      expect(routed.body.kind).toBe('json');
      const via = JSON.parse(Buffer.from((routed.body as { bytes: Uint8Array }).bytes).toString('utf8')) as Json;
      // The ids (the answer's, a tool call's) are the engine's for the leg's own request id; everything else is the
      // engine's unstreamed answer.
      expect(via['id']).toMatch(/^(chatcmpl|cmpl)-/);
      const anonymous = (j: Json): unknown =>
        normalized(
          JSON.parse(JSON.stringify({ ...j, id: '', created: 0 }).replace(/"chatcmpl-tool-[0-9a-f]+"/g, '"tool"')),
        );
      expect(anonymous(via)).toEqual(anonymous(direct));
    });
  }
});
