/**
 * An agent's conversation through `kvgate serve` (one preprocessing thread, so every body past 16 KiB is decoded,
 * parsed and preprocessed there) in front of a `kvgate mocker` engine, real processes and sockets. Each turn's body
 * is large and not ASCII (CJK, Latin-1 and astral characters): `/v1/route`'s ids must be the engine's own for the
 * same chat, turn after turn; `return_token_ids: false` leaves them out of the answer and nothing else; and a large
 * body that is not UTF-8, or nests too deep, is refused with its stable code while the conversation goes on.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServeCli } from '../../helpers/cli-process.js';
import { serveConfig, startMockerSuite, workerEntry, type MockerSuite } from '../../helpers/serve-suite.js';

const MODEL = 'mock-model';

/** A turn's text: ~`words` words drawn from ASCII, Latin-1, CJK and astral words by a seeded generator. */
function text(seed: number, words: number): string {
  const vocab = ['the', 'router', 'reads', 'ünïcode', 'café', '日本語の', 'ファイル', 'emoji', '😀', '𝔘nit', 'agents'];
  let s = seed >>> 0;
  const out: string[] = [];
  for (let i = 0; i < words; i++) {
    s = (s * 1103515245 + 12345) >>> 0;
    out.push(vocab[s % vocab.length]!);
  }
  return out.join(' ');
}

describe('an agent conversation of large non-ASCII bodies through kvgate serve', () => {
  let suite: MockerSuite;
  let url: string;
  let engine: string;

  const post = async (path: string, body: unknown, base = url): Promise<{ status: number; json: any }> => {
    const res = await fetch(`${base}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: typeof body === 'string' || body instanceof Uint8Array ? body : JSON.stringify(body),
    });
    return { status: res.status, json: await res.json() };
  };

  beforeAll(async () => {
    suite = await startMockerSuite('agent-turns', ['--speedup', '100', '--tokenizer', 'demo'], 1);
    engine = suite.engines[0]!.url;
    const file = suite.write(
      'serve.yaml',
      serveConfig(
        MODEL,
        ['max_prompt_tokens: 60000', 'workers:', `  - ${workerEntry(1, suite.engines[0]!)}`],
        ['preprocess: { threads: 1 }'],
      ),
    );
    const served = await startServeCli(file);
    suite.procs.push(served.proc);
    url = served.url;
  });

  afterAll(async () => {
    await suite?.stop();
  });

  it("routes each turn on the engine's own ids, and leaves them out when asked", async () => {
    const messages = [
      { role: 'system', content: `You are a coding agent. ${text(1, 300)}` },
      { role: 'user', content: text(2, 2000) },
    ];
    for (let turn = 0; turn < 4; turn++) {
      const body = { model: MODEL, messages };
      expect(Buffer.byteLength(JSON.stringify(body))).toBeGreaterThan(16_384);
      const engineIds = (await post('/tokenize', body, engine)).json.tokens as number[];
      const full = await post('/v1/route', body);
      expect(full.status).toBe(200);
      expect(full.json.token_ids).toEqual(engineIds);
      const lean = await post('/v1/route', { ...body, return_token_ids: false });
      expect(lean.status).toBe(200);
      expect(lean.json.token_ids).toBeUndefined();
      expect(lean.json).toMatchObject({
        prompt_tokens: engineIds.length,
        prompt_blocks: full.json.prompt_blocks,
        worker: full.json.worker,
      });
      messages.push(
        { role: 'assistant', content: text(10 + turn, 600) },
        { role: 'user', content: text(20 + turn, 600) },
      );
    }
  });

  it('refuses a large body that is not UTF-8, or nests too deep, and serves the next one', async () => {
    const good = { model: MODEL, messages: [{ role: 'user', content: text(3, 4000) }] };
    const bytes = Buffer.from(JSON.stringify(good));
    // An encoded surrogate inside the content: not UTF-8.
    const at = bytes.indexOf('日');
    const bad = Buffer.concat([bytes.subarray(0, at), Buffer.from([0xed, 0xa0, 0x80]), bytes.subarray(at)]);
    const notText = await post('/v1/route', bad);
    expect(notText.status).toBe(400);
    expect(notText.json.error.code).toBe('KVG_ERR_INVALID_JSON');
    const deep = JSON.stringify({ ...good, tools: [{ type: 'function', function: { parameters: nested(150) } }] });
    const tooDeep = await post('/v1/route', deep);
    expect(tooDeep.status).toBe(400);
    expect(tooDeep.json.error.code).toBe('KVG_ERR_INVALID_REQUEST');
    expect(tooDeep.json.error.message).toMatch(/deeper than 100 levels/);
    const again = await post('/v1/route', good);
    expect(again.status).toBe(200);
    expect(again.json.token_ids).toEqual((await post('/tokenize', good, engine)).json.tokens);
  });
});

function nested(levels: number): unknown {
  let v: unknown = {};
  for (let i = 0; i < levels; i++) v = { a: v };
  return v;
}
