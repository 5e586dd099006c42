/**
 * A lone UTF-16 surrogate escape in a JSON body ("\ud800": valid JSON grammar, no Unicode character) is a 400
 * KVG_ERR_INVALID_REQUEST naming the field, on the main thread (a small body) and on a pool thread (a large one),
 * for every endpoint that parses a body; before, the gateway tokenized a replacement character and routed a body
 * the engine refuses. A surrogate pair, and an escaped backslash before `u`, are text like any other.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { refuseLoneSurrogates } from '../../src/frontend/lone-surrogates.js';
import { FakeRouter } from './fake-router.js';
import { largeBodyConfig, startPoolGateway, type PoolGateway } from './server-harness.js';

let g: PoolGateway;
beforeAll(async () => {
  g = await startPoolGateway(largeBodyConfig(), new FakeRouter({ model: 'demo', workerIds: [1] }), { threads: 1 });
});
afterAll(async () => {
  await g.close();
});

async function send(path: string, body: string): Promise<{ status: number; json: any }> {
  const r = await fetch(`${g.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
  return { status: r.status, json: await r.json() };
}

/** Past the size parsed on a pool thread. */
const PAD = 'x '.repeat(20_000);

describe('a lone surrogate escape in a body', () => {
  for (const big of [false, true]) {
    const pad = big ? PAD : '';
    const where = big ? 'a large body (a pool thread)' : 'a small body';
    const cases: [string, string, string][] = [
      [
        '/v1/chat/completions',
        `{"model":"demo","messages":[{"role":"user","content":"hi"},{"role":"user","content":"a\\ud800b${pad}"}]}`,
        'messages[1].content',
      ],
      [
        '/v1/chat/completions',
        `{"model":"demo","messages":[{"role":"user","content":[{"type":"text","text":"${pad}\\udfff"}]}]}`,
        'messages[0].content[0].text',
      ],
      ['/v1/completions', `{"model":"demo","prompt":"${pad}a\\uD83D","max_tokens":4}`, 'prompt'],
      ['/tokenize', `{"model":"demo","prompt":"a\\ud800\\ud800${pad}"}`, 'prompt'],
    ];
    for (const [path, body, param] of cases) {
      it(`${path}, ${param}: 400 KVG_ERR_INVALID_REQUEST naming it (${where})`, async () => {
        const r = await send(path, body);
        expect(r.status).toBe(400);
        expect(r.json.error).toMatchObject({ code: 'KVG_ERR_INVALID_REQUEST', param });
        expect(r.json.error.message).toContain('lone UTF-16 surrogate');
      });
    }
    it(`a surrogate pair and an escaped backslash before u are served (${where})`, async () => {
      const content = `pair \\ud83d\\ude00 and text \\\\ud800 ${pad}`;
      const r = await send(
        '/v1/chat/completions',
        `{"model":"demo","messages":[{"role":"user","content":"${content}"}]}`,
      );
      expect(r.status).toBe(200);
    });
  }

  it('is found at the end of the text, after other escapes, and in a key', () => {
    const refused = (text: string): unknown => {
      try {
        refuseLoneSurrogates(text, JSON.parse(text) as Record<string, unknown>);
        return undefined;
      } catch (err) {
        return (err as { detail?: { param?: unknown } }).detail?.param;
      }
    };
    expect(refused('{"a":"\\n\\"\\\\\\ud800"}')).toBe('a');
    expect(refused('{"a":["ok","\\u00e9\\udbff"]}')).toBe('a[1]');
    expect(refused('{"a":{"\\ud800":1}}')).toBe('a.\ud800');
    expect(refused('{"a":"\\ud800\\udc00\\u0041"}')).toBeUndefined();
    expect(refused('{"a":"\\\\ud800"}')).toBeUndefined();
  });
});
