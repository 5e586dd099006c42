/**
 * A large body reaches its engine as the client's own bytes: `kvgate serve` (one preprocessing thread, so every
 * body past 16 KiB is parsed there and the main thread writes the engine's body from the client's bytes) in front
 * of a `kvgate mocker` engine, with a relay between them that keeps what the engine was sent, byte for byte. An
 * agent's ~100k-token conversation of non-ASCII text (CJK, Latin-1, astral characters, escapes) is forwarded with
 * its `messages` exactly as the client wrote them, the fields kvgate lays over in place and an exact Content-Length;
 * a completion of ~100k token ids (read from the bytes, not parsed as JSON) reaches the engine as the same ids.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mulberry32 } from '../../helpers/rng.js';
import { startRecordingRelay, type RecordingRelay, type RelayedRequest } from '../../helpers/recording-relay.js';
import { serveConfig, serveInSuite, startMockerSuite, type MockerSuite } from '../../helpers/serve-suite.js';

const MODEL = 'mock-model';
const SERVED = 'engine-name';

const VOCAB = [
  'the',
  'ünïcode',
  'café',
  '日本語の',
  'ファイル',
  '😀',
  '𝔘nit',
  'say "hi"',
  'C:\\path',
  'a\nb',
  '\u2028',
];

/** ~`words` words of ASCII, Latin-1, CJK and astral text, with quotes, backslashes and line breaks to escape. */
function text(seed: number, words: number): string {
  const rnd = mulberry32(seed);
  return Array.from({ length: words }, () => VOCAB[Math.floor(rnd() * VOCAB.length)]!).join(' ');
}

describe("a large body reaches its engine as the client's bytes", () => {
  let suite: MockerSuite;
  let relay: RecordingRelay;
  let url: string;

  const send = async (path: string, body: string | Buffer): Promise<{ status: number; text: string }> => {
    const res = await fetch(`${url}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body,
    });
    return { status: res.status, text: await res.text() };
  };
  /** The last request the engine was sent on `path`. */
  const lastSent = (path: string): RelayedRequest =>
    relay
      .requests()
      .filter((r) => r.path === path)
      .at(-1)!;

  beforeAll(async () => {
    suite = await startMockerSuite(
      'forwarded-bytes',
      ['--model', SERVED, '--speedup', '100', '--tokenizer', 'demo', '--max-model-len', '400000'],
      1,
    );
    const engine = suite.engines[0]!;
    relay = await startRecordingRelay(Number(new URL(engine.url).port));
    const file = suite.write(
      'serve.yaml',
      serveConfig(
        MODEL,
        [
          `served_model_name: ${SERVED}`,
          'max_prompt_tokens: 400000',
          'workers:',
          `  - { id: 1, url: "http://127.0.0.1:${relay.port}", kv_events: "${engine.kv_events[0]}" }`,
        ],
        ['preprocess: { threads: 1 }'],
      ),
    );
    url = await serveInSuite(suite, file);
  });

  afterAll(async () => {
    await Promise.all([suite?.stop(), relay?.close()]);
  });

  it("forwards a ~100k-token non-ASCII conversation's messages byte for byte, streamed and not", async () => {
    const messages = [{ role: 'system', content: `You are a coding agent. ${text(1, 300)}` }];
    for (let turn = 0; turn < 40; turn++)
      messages.push({ role: turn % 2 === 0 ? 'user' : 'assistant', content: text(10 + turn, 1000) });
    const route = await send('/v1/route', JSON.stringify({ model: MODEL, messages, return_token_ids: false }));
    expect(route.status, route.text.slice(0, 300)).toBe(200);
    expect(JSON.parse(route.text).prompt_tokens).toBeGreaterThan(100_000);
    const messagesBytes = Buffer.from(JSON.stringify(messages));
    for (const stream of [true, false]) {
      const client = { model: MODEL, messages, max_tokens: 3, stream, temperature: 0 };
      // A leading byte order mark, which kvgate skips as vLLM does.
      const sent = await send(
        '/v1/chat/completions',
        Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from(JSON.stringify(client))]),
      );
      expect(sent.status, sent.text.slice(0, 300)).toBe(200);
      const got = lastSent('/v1/chat/completions');
      expect(Number(got.headers['content-length'])).toBe(got.body.length);
      // The client's bytes of `messages`, unchanged; the JSON value is theirs with kvgate's fields laid over.
      expect(got.body.indexOf(messagesBytes)).toBeGreaterThan(0);
      const engineBody = JSON.parse(got.body.toString('utf8')) as Record<string, unknown>;
      expect(engineBody.messages).toEqual(messages);
      expect(engineBody).toMatchObject({ model: SERVED, max_tokens: 3, temperature: 0, stream: true });
      expect(engineBody.stream_options).toEqual({ include_usage: true });
      // Each member once: what was replaced stands where the client had it.
      expect(Object.keys(engineBody).slice(0, 5)).toEqual(['model', 'messages', 'max_tokens', 'stream', 'temperature']);
    }
  });

  it('sends a completion of ~100k token ids, read from the bytes, as those ids', async () => {
    let s = 7;
    const prompt = Array.from({ length: 100_000 }, () => (s = (s * 1103515245 + 12345) >>> 0) % 150_000);
    // Pretty-printed with JSON white space between the ids.
    const body = JSON.stringify({ model: MODEL, prompt, max_tokens: 2 }, null, 1);
    const route = await send('/v1/route', JSON.stringify({ model: MODEL, prompt, return_token_ids: false }));
    expect(route.status, route.text.slice(0, 300)).toBe(200);
    expect(JSON.parse(route.text).prompt_tokens).toBe(prompt.length);
    const r = await send('/v1/completions', body);
    expect(r.status, r.text.slice(0, 300)).toBe(200);
    const got = lastSent('/v1/completions');
    expect(Number(got.headers['content-length'])).toBe(got.body.length);
    const engineBody = JSON.parse(got.body.toString('utf8')) as Record<string, unknown>;
    expect(engineBody.prompt).toEqual(prompt);
    expect(engineBody).toMatchObject({ model: SERVED, max_tokens: 2 });
  });
});
