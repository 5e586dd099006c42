/**
 * The mocker's streams respect backpressure, as vLLM's (starlette awaits each send, uvicorn waits for the
 * socket to drain): a client that stops reading a long stream leaves the engine's response buffer bounded
 * (about its high-water mark and one token's events), not the whole stream queued behind the socket; once it
 * reads again, every event comes, in order, then the stream's end. Meanwhile the request keeps its slot and
 * runs to its end, as in vLLM, whose engine core never learns that a client is slow: its output waits, compact,
 * for the writer. Every streaming path: completions, chat, Messages, Responses. Real sockets, a raw
 * node:http reader; the engine's response is seen through a hook on `ServerResponse.prototype.write`.
 *
 * Before the fix the writers wrote every event at once: the paused client's stream sat in the engine's
 * response buffer, megabytes of it.
 */
import { ServerResponse } from 'node:http';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { startMocker, type MockerHandle } from '../../src/mocker/index.js';
import { metric } from '../helpers/metric-sum.js';
import { namedEvents, readSse, type SseRead } from '../helpers/sse-reader.js';
import { postJson, until } from './helpers.js';

let m: MockerHandle;
/** The engine's response to each request, by its `x-request-id`, and the most it ever held unsent. */
const seen = new Map<string, { res: ServerResponse; maxBuffered: number }>();

beforeAll(async () => {
  m = await startMocker({ speedup: 1000, maxModelLen: 200_000, kvEvents: false, tokenizer: 'demo' });
  const write = ServerResponse.prototype.write;
  vi.spyOn(ServerResponse.prototype, 'write').mockImplementation(function (
    this: ServerResponse,
    ...args: Parameters<typeof write>
  ) {
    const ok = write.apply(this, args);
    const id = this.req.headers['x-request-id'];
    if (typeof id === 'string') {
      const s = seen.get(id) ?? { res: this, maxBuffered: 0 };
      s.maxBuffered = Math.max(s.maxBuffered, this.writableLength);
      seen.set(id, s);
    }
    return ok;
  });
});
afterAll(async () => {
  vi.restoreAllMocks();
  await m.close();
});

interface Api {
  readonly path: string;
  /**
   * The request; unstreamed, the reference answer, whose text the stream's pieces must make. The reference asks
   * for no logprobs: they are a function of each token and leave the text as it is, and building and parsing
   * thousands of tokens' twenty alternatives took seconds.
   */
  body(tokens: number, stream: boolean): Record<string, unknown>;
  /** The streamed answer's text pieces, in order. */
  pieces(r: SseRead): string[];
  /** The unstreamed answer's text. */
  whole(json: any): string; // eslint-disable-line @typescript-eslint/no-explicit-any
  /** Where the stream's closing events begin (Responses' repeat the whole text, one write each). */
  readonly closing: string;
}

const MODEL = 'mock-model';
const PROMPT = 'Tell a very long story.';
const dataOf = (r: SseRead, event: string): any[] =>
  // eslint-disable-line @typescript-eslint/no-explicit-any
  namedEvents(r)
    .filter((e) => e.event === event)
    .map((e) => JSON.parse(e.data));
const openAiChunks = (r: SseRead): any[] =>
  // eslint-disable-line @typescript-eslint/no-explicit-any
  r.events.filter((e) => e !== '[DONE]').map((e) => JSON.parse(e));

// Logprobs make an OpenAI chunk about 700 bytes, so thousands of tokens outgrow the kernel's socket buffers
// (about 2 MB on loopback) by megabytes; the agent APIs' events are a hundred bytes or two, so their streams
// are longer.
const APIS: Record<string, Api & { tokens: number }> = {
  completions: {
    path: '/v1/completions',
    tokens: 16_000,
    body: (n, stream) => ({
      model: MODEL,
      prompt: PROMPT,
      max_tokens: n,
      ignore_eos: true,
      ...(stream ? { logprobs: 20 } : {}),
      stream,
    }),
    pieces: (r) => openAiChunks(r).map((c) => c.choices[0].text as string),
    whole: (json) => json.choices[0].text,
    closing: 'data: [DONE]',
  },
  chat: {
    path: '/v1/chat/completions',
    tokens: 16_000,
    body: (n, stream) => ({
      model: MODEL,
      messages: [{ role: 'user', content: PROMPT }],
      max_tokens: n,
      ignore_eos: true,
      ...(stream ? { logprobs: true, top_logprobs: 20 } : {}),
      stream,
    }),
    pieces: (r) => openAiChunks(r).map((c) => (c.choices[0].delta.content ?? '') as string),
    whole: (json) => json.choices[0].message.content,
    closing: 'data: [DONE]',
  },
  messages: {
    path: '/v1/messages',
    tokens: 100_000,
    body: (n, stream) => ({ model: MODEL, messages: [{ role: 'user', content: PROMPT }], max_tokens: n, stream }),
    pieces: (r) => dataOf(r, 'content_block_delta').map((d) => d.delta.text as string),
    whole: (json) => json.content[0].text,
    closing: 'event: content_block_stop',
  },
  responses: {
    path: '/v1/responses',
    tokens: 50_000,
    body: (n, stream) => ({ model: MODEL, input: PROMPT, max_output_tokens: n, stream }),
    pieces: (r) => dataOf(r, 'response.output_text.delta').map((d) => d.delta as string),
    whole: (json) => json.output[0].content[0].text,
    closing: 'event: response.output_text.done',
  },
};

describe('a client that stops reading a long stream', () => {
  it.each(Object.keys(APIS))(
    '%s: the engine holds at most a few KB unsent, then every event comes in order',
    async (name) => {
      const api = APIS[name]!;
      const id = `paused-${name}`;
      const url = `${m.url}${api.path}`;
      const finished = async (): Promise<number> => metric(m.url, 'vllm:e2e_request_latency_seconds_count');
      const before = await finished();
      let bufferedWhilePaused = -1;
      // The reader stops at its first bytes and reads again only once the engine finished the request: the
      // request ran to its end on the engine while its client read nothing.
      const r = await readSse(
        url,
        api.body(api.tokens, true),
        {
          stopAfterBytes: 1,
          resumeWhen: async () => {
            await until(async () => (await finished()) > before, 'the engine to finish the request', 60_000);
            bufferedWhilePaused = seen.get(id)!.res.writableLength;
          },
        },
        { 'x-request-id': id },
      );
      const s = seen.get(id)!;
      // Its high-water mark and one token's events (a few KB); at the end, the closing events besides.
      const bound = s.res.writableHighWaterMark + 32 * 1024;
      expect(bufferedWhilePaused).toBeGreaterThanOrEqual(0);
      expect(bufferedWhilePaused).toBeLessThan(bound);
      expect(s.maxBuffered).toBeLessThan(bound + Buffer.byteLength(r.text.slice(r.text.lastIndexOf(api.closing))));

      expect(r.status).toBe(200);
      expect(r.ending).toBe('end');
      const pieces = api.pieces(r);
      expect(pieces.filter((p) => p !== '')).toHaveLength(api.tokens);
      // Same prompt, same seed: the unstreamed answer's text is the streamed pieces in their order.
      const whole = await postJson(url, api.body(api.tokens, false));
      expect(pieces.join('')).toBe(api.whole(whole.json));
      if (name === 'responses') {
        const seqs = namedEvents(r).map((e) => (JSON.parse(e.data) as { sequence_number: number }).sequence_number);
        expect(seqs).toEqual(seqs.map((_, i) => i));
      }
      if (name === 'messages') expect(namedEvents(r).at(-1)?.event).toBe('message_stop');
      else if (name !== 'responses') expect(r.events.at(-1)).toBe('[DONE]');
    },
    120_000,
  );
});
