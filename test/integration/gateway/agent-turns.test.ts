/**
 * Agent turns through `kvgate serve` (real processes: a `kvgate mocker`
 * engine, two gateways with two preprocessing threads each, one with the
 * conversation cache and one without): two conversations, interleaved, each
 * turn resending the whole history plus an answer and a new message, in
 * bodies large enough to be parsed on a preprocessing thread. Every turn's
 * token ids (POST /v1/route) are those of the gateway without the cache; each
 * conversation's follow-ups reach the thread that holds it and reuse its ids
 * (`kvgate_preprocess_conversation_tokens_total{source="reused"}`), and the
 * caches' size is in /metrics.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServeCli } from '../../helpers/cli-process.js';
import { metric } from '../../helpers/metric-sum.js';
import { serveConfig, startMockerSuite, workerEntry, type MockerSuite } from '../../helpers/serve-suite.js';

const MODEL = 'mock-model';
const WORDS = ['agent', 'tool', 'cache', 'prefix', 'naïve', '東京', 'router', '{"a": 1}', 'file', 'diff'];

function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => (s = (s * 1103515245 + 12345) >>> 0) / 2 ** 32;
}

function text(rnd: () => number, n: number): string {
  return Array.from({ length: n }, () => WORDS[Math.floor(rnd() * WORDS.length)]!).join(' ');
}

async function route(url: string, messages: unknown[]): Promise<number[]> {
  const res = await fetch(`${url}/v1/route`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL, messages }),
  });
  const body = (await res.json()) as { token_ids?: number[] };
  expect(res.status, JSON.stringify(body).slice(0, 300)).toBe(200);
  return body.token_ids!;
}

describe('agent turns: the conversation cache across preprocessing threads', () => {
  let suite: MockerSuite;
  let cached: string;
  let reference: string;

  beforeAll(async () => {
    suite = await startMockerSuite(
      'agent-turns',
      ['--speedup', '1000', '--max-model-len', '65536', '--tokenizer', 'demo'],
      1,
    );
    const gateway = async (name: string, bytes: number): Promise<string> => {
      const file = suite.write(
        `${name}.yaml`,
        serveConfig(
          MODEL,
          ['workers:', `  - ${workerEntry(1, suite.engines[0]!)}`],
          [`preprocess: { threads: 2, conversation_cache_bytes: ${bytes} }`],
        ),
      );
      const { proc, url } = await startServeCli(file);
      suite.procs.push(proc);
      return url;
    };
    cached = await gateway('cached', 64 * 1024 * 1024);
    reference = await gateway('reference', 0);
  }, 60_000);

  afterAll(async () => {
    await suite?.stop();
  });

  it('gives the ids of a full preprocessing on every turn and reuses each conversation on its thread', async () => {
    const rnd = rng(3);
    const conversations = [0, 1, 2].map((i) => [
      { role: 'system', content: `You are agent ${i}. ${text(rnd, 4000)}` },
      { role: 'user', content: `task ${i}: ${text(rnd, 300)}` },
    ]);
    let followUpTokens = 0;
    for (let turn = 0; turn < 5; turn++) {
      for (const messages of conversations) {
        const ids = await route(cached, messages);
        expect(ids).toEqual(await route(reference, messages));
        if (turn > 0) followUpTokens += ids.length;
        messages.push({ role: 'assistant', content: text(rnd, 200) }, { role: 'user', content: text(rnd, 200) });
      }
    }
    const reused = await metric(cached, 'kvgate_preprocess_conversation_tokens_total', { source: 'reused' });
    // Each follow-up reuses all but its newest two messages (a tenth of it at most).
    expect(reused).toBeGreaterThan(0.85 * followUpTokens);
    expect(await metric(cached, 'kvgate_preprocess_conversation_cache_entries', { model: MODEL })).toBe(3);
    expect(await metric(cached, 'kvgate_preprocess_conversation_cache_bytes', { model: MODEL })).toBeGreaterThan(0);
    expect(await metric(reference, 'kvgate_preprocess_conversation_tokens_total', { source: 'reused' })).toBe(0);
  }, 120_000);
});
