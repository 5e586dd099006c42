/**
 * The memory soak (`npm run soak`, not part of `npm test`): a real `kvgate
 * serve` (under `node --expose-gc`, admin on, an API key) in front of a real
 * mocker process with two engines publishing KV events, fed a few minutes of
 * mixed traffic over loopback. Traffic pauses after the warm-up and after
 * each later phase, the gateway collects garbage (`POST /admin/gc`) and
 * reports its heap; the heap at the end must be within 10 % of the heap after
 * warm-up.
 *
 * What it feeds: chats sharing a ~24 KB system prompt with a unique user turn
 * (the segment cache's worst case), multi-turn conversations on sticky
 * sessions, text completions, query-only routing, streams the client drops
 * after the first chunk, model listings, and bad requests. Everything that
 * legitimately fills up (segment cache, engines' KV caches and so the prefix
 * index, session bindings) is bounded small enough to be full by the end of
 * the warm-up, so what is left to grow is a leak. Preprocessing runs on the
 * main thread, so the segment cache is on the measured heap.
 *
 * Knobs (environment): SOAK_SECONDS (default 180, total), SOAK_WARMUP_SECONDS
 * (default 45), SOAK_CONCURRENCY (default 8), SOAK_MAX_REQUESTS (default 200000).
 * Prints a JSON summary (the figures BENCHMARKS.md records).
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { seededRng } from '../../src/common/index.js';
import { servingUrl, startKvgate, type KvgateProcess } from '../helpers/kvgate-process.js';
import { heapAfterGc, mib, type Heap } from './gateway-heap.js';

const SECONDS = Number(process.env.SOAK_SECONDS ?? 180);
const WARMUP_SECONDS = Number(process.env.SOAK_WARMUP_SECONDS ?? 45);
const CONCURRENCY = Number(process.env.SOAK_CONCURRENCY ?? 8);
const MAX_REQUESTS = Number(process.env.SOAK_MAX_REQUESTS ?? 200_000);
const PHASES = 3;
const KEY = 'soak-test-key-0123';
const MODEL = 'mock-model';

const WORDS = [
  'alpha',
  'beta',
  'gamma',
  'delta',
  'kernel',
  'cache',
  'router',
  'token',
  'block',
  'engine',
  'prefix',
  'latency',
  'naïve',
  '東京',
];

const procs: KvgateProcess[] = [];
let dir: string | undefined;
afterAll(async () => {
  await Promise.all(
    procs
      .splice(0)
      .reverse()
      .map((p) => p.stop()),
  );
  if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
});

/** The mixed traffic: one request per call, chosen by a seeded rng; resolves with the HTTP status. */
function trafficOf(url: string, rng: () => number): () => Promise<number> {
  const words = (n: number) => Array.from({ length: n }, () => WORDS[Math.floor(rng() * WORDS.length)]).join(' ');
  const system = words(3400); // ~24 KB
  const conversations = Array.from({ length: 32 }, () => [] as { role: string; content: string }[]);
  const auth = { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' };
  let n = 0;
  const post = async (
    path: string,
    body: unknown,
    headers: Record<string, string> = {},
    abortAfterFirstChunk = false,
  ): Promise<number> => {
    const ac = new AbortController();
    const res = await fetch(`${url}${path}`, {
      method: 'POST',
      headers: { ...auth, ...headers },
      body: typeof body === 'string' ? body : JSON.stringify(body),
      signal: ac.signal,
    });
    if (abortAfterFirstChunk && res.body !== null) {
      const reader = res.body.getReader();
      await reader.read();
      ac.abort();
      await reader.cancel().catch(() => undefined);
    } else await res.arrayBuffer();
    return res.status;
  };
  return async () => {
    const i = n++;
    const r = rng();
    const stream = i % 2 === 0;
    if (r < 0.45) {
      return post('/v1/chat/completions', {
        model: MODEL,
        max_tokens: 8,
        stream,
        messages: [
          { role: 'system', content: system },
          { role: 'user', content: `question ${i}: ${words(20)}` },
        ],
      });
    }
    if (r < 0.6) {
      const c = Math.floor(rng() * conversations.length);
      const history = conversations[c]!;
      history.push({ role: 'user', content: `turn ${i}: ${words(15)}` });
      const status = await post(
        '/v1/chat/completions',
        { model: MODEL, max_tokens: 8, stream, messages: history },
        { 'x-session-id': `conv-${c}` },
      );
      history.push({ role: 'assistant', content: words(8) });
      if (history.length > 12) history.splice(0, 2); // bounded conversations: old turns scroll out
      return status;
    }
    if (r < 0.72) return post('/v1/completions', { model: MODEL, max_tokens: 8, stream, prompt: `${words(60)} ${i}` });
    if (r < 0.82)
      return post('/v1/route', {
        model: MODEL,
        messages: [
          { role: 'system', content: system },
          { role: 'user', content: `route ${i}` },
        ],
      });
    if (r < 0.88)
      return post(
        '/v1/chat/completions',
        {
          model: MODEL,
          max_tokens: 64,
          stream: true,
          messages: [{ role: 'user', content: `dropped ${i}: ${words(30)}` }],
        },
        {},
        true,
      );
    if (r < 0.93) {
      const res = await fetch(`${url}/v1/models`, { headers: auth });
      await res.arrayBuffer();
      return res.status;
    }
    if (r < 0.97) return post('/v1/chat/completions', '{"model": "mock-model", "messages": [');
    return post('/v1/chat/completions', { model: 'no-such-model', messages: [{ role: 'user', content: 'hi' }] });
  };
}

/** Runs `next` on CONCURRENCY loops until `untilMs` (performance.now) or the request budget is spent. */
async function run(
  next: () => Promise<number>,
  untilMs: number,
  budget: { left: number },
  statuses: Map<number, number>,
): Promise<void> {
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (performance.now() < untilMs && budget.left > 0) {
        budget.left--;
        let status: number;
        try {
          status = await next();
        } catch {
          status = -1; // a connection-level failure
        }
        statuses.set(status, (statuses.get(status) ?? 0) + 1);
      }
    }),
  );
}

describe('memory soak', () => {
  it(
    `heap after forced GC at the end is within 10 % of its value after warm-up (${SECONDS} s of mixed traffic)`,
    async () => {
      dir = mkdtempSync(join(tmpdir(), 'kvgate-soak-'));
      const mocker = startKvgate([
        'mocker',
        '--count',
        '2',
        '--port',
        '0',
        '--kv-events-port',
        '0',
        '--bootstrap-port',
        '0',
        '--tokenizer',
        'demo',
        '--speedup',
        '100',
        '--num-gpu-blocks',
        '2048',
        '--seed',
        '5',
      ]);
      procs.push(mocker);
      const engines = await Promise.all(
        [0, 1].map((i) => mocker.jsonLine(`engine ${i}`, (o) => o.index === i && typeof o.url === 'string')),
      );
      const config = join(dir, 'kvgate.json');
      writeFileSync(
        config,
        JSON.stringify({
          listen: { host: '127.0.0.1', port: 0 },
          admin: { enabled: true },
          auth: { api_keys: [KEY] },
          // Small bounds, so that they are full by the end of the warm-up: growth after it is a leak.
          preprocess: { threads: 0, segment_cache_bytes: 1024 * 1024 },
          limits: { max_sessions: 1000 },
          log: { level: 'warn' },
          models: [
            {
              name: MODEL,
              tokenizer: 'demo',
              block_size: 16,
              session_affinity: 'pin', // bindings kept, so the session table fills to its bound
              workers: engines.map((e, i) => ({ id: i + 1, url: e.url, kv_events: (e.kv_events as string[])[0] })),
            },
          ],
        }),
      );
      const gateway = startKvgate(['serve', '--config', config], ['--expose-gc']);
      procs.push(gateway);
      // The banner is on stderr (stdout carries only JSON log lines).
      const url = await servingUrl(gateway);

      const next = trafficOf(url, seededRng(2024));
      const statuses = new Map<number, number>();
      const budget = { left: MAX_REQUESTS };
      const t0 = performance.now();
      await run(next, t0 + WARMUP_SECONDS * 1000, budget, statuses);
      const series: { atS: number; requests: number; heap: Heap }[] = [];
      const auth = { authorization: `Bearer ${KEY}` };
      const sample = async () =>
        series.push({
          atS: Math.round((performance.now() - t0) / 1000),
          requests: MAX_REQUESTS - budget.left,
          heap: await heapAfterGc(url, auth),
        });
      await sample();
      const phaseMs = ((SECONDS - WARMUP_SECONDS) * 1000) / PHASES;
      for (let p = 1; p <= PHASES; p++) {
        await run(next, t0 + WARMUP_SECONDS * 1000 + p * phaseMs, budget, statuses);
        await sample();
      }
      const warm = series[0]!.heap;
      const end = series.at(-1)!.heap;
      const requests = MAX_REQUESTS - budget.left;
      const seconds = (performance.now() - t0) / 1000;
      const summary = {
        seconds: Math.round(seconds),
        requests,
        reqPerS: Math.round(requests / seconds),
        concurrency: CONCURRENCY,
        statuses: Object.fromEntries([...statuses].sort((a, b) => a[0] - b[0])),
        heapMiB: series.map((s) => ({
          atS: s.atS,
          requests: s.requests,
          heapUsed: mib(s.heap.heapUsed),
          arrayBuffers: mib(s.heap.arrayBuffers),
          rss: mib(s.heap.rss),
          gcMs: s.heap.gcMs,
        })),
        endOverWarm: Math.round((end.heapUsed / warm.heapUsed) * 1000) / 1000,
      };
      process.stdout.write(`kvgate soak: ${JSON.stringify(summary)}\n`);
      // Every request got an answer kvgate meant to give (no 5xx, no dropped connection).
      for (const status of statuses.keys()) expect([200, 400, 404]).toContain(status);
      expect(end.heapUsed).toBeLessThanOrEqual(warm.heapUsed * 1.1);
    },
    (SECONDS + 180) * 1000,
  );
});
