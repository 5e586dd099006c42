/**
 * Added latency of the router: TTFT measured at the client for
 * 2,000 streaming completions at 64 concurrent, sent to one mocker engine
 * directly and through `kvgate serve` (kv mode, KV events on) in front of the
 * same engine, in the same run. Engine, gateway and load generator are three
 * processes; the two targets alternate in rounds so drift affects both.
 * Prompts are token ids (no tokenizer cost): half share a long prefix.
 * Run: npm run bench -- added-latency
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Pool } from 'undici';
import { seededRng } from '../../src/common/index.js';
import { freePort, type BenchRow, type BenchSection } from '../util.js';

export const title =
  'Router added latency: TTFT through kvgate serve vs the engine alone (2,000 streaming requests, 64 concurrent)';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../../..');
const KVGATE = join(ROOT, 'bin', 'kvgate.js');
const REQUESTS = 2000;
const CONCURRENCY = 64;
const ROUNDS = 4;

function start(args: string[]): { child: ChildProcess; firstLine: Promise<string> } {
  const child = spawn(process.execPath, [KVGATE, ...args], { stdio: ['ignore', 'pipe', 'inherit'] });
  const rl = createInterface({ input: child.stdout! });
  const firstLine = new Promise<string>((res, rej) => {
    rl.once('line', res);
    child.once('exit', (code) => rej(new Error(`kvgate ${args[0]} exited with ${code}`)));
  });
  return { child, firstLine };
}

async function waitReady(url: string, path: string): Promise<void> {
  const end = Date.now() + 20_000;
  for (;;) {
    try {
      const r = await fetch(url + path);
      if (r.ok) return;
    } catch {
      // not listening yet
    }
    if (Date.now() > end) throw new Error(`${url}${path} never became ready`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))]!;
}

/** Sends `n` streaming completions at `CONCURRENCY`; returns TTFTs in ms. */
async function load(pool: Pool, model: string, n: number, seed: number, concurrency = CONCURRENCY): Promise<number[]> {
  const rng = seededRng(seed);
  const shared = Array.from({ length: 512 }, () => 1 + Math.floor(rng() * 30_000));
  const ttfts: number[] = [];
  let next = 0;
  const one = async (): Promise<void> => {
    const prompt =
      rng() < 0.5
        ? [...shared, ...Array.from({ length: 64 }, () => 1 + Math.floor(rng() * 30_000))]
        : Array.from({ length: 576 }, () => 1 + Math.floor(rng() * 30_000));
    const t0 = performance.now();
    const res = await pool.request({
      method: 'POST',
      path: '/v1/completions',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model, prompt, max_tokens: 8, stream: true }),
    });
    if (res.statusCode !== 200) throw new Error(`HTTP ${res.statusCode}: ${await res.body.text()}`);
    let first = true;
    for await (const chunk of res.body) {
      if (first && (chunk as Buffer).includes('"text"')) {
        ttfts.push(performance.now() - t0);
        first = false;
      }
    }
  };
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < n) {
        next++;
        await one();
      }
    }),
  );
  return ttfts;
}

export async function run(): Promise<BenchSection> {
  const model = 'bench-model';
  const mocker = start([
    'mocker',
    '--count',
    '1',
    '--port',
    '0',
    '--kv-events-port',
    '0',
    '--model',
    model,
    '--speedup',
    '100',
    '--block-size',
    '16',
  ]);
  const info = JSON.parse(await mocker.firstLine) as { url: string; kv_events: string[] };
  const gwPort = await freePort();
  const gateway = start([
    'serve',
    '--port',
    String(gwPort),
    '--model',
    model,
    '--worker',
    `url=${info.url},id=1,kv_events=${info.kv_events[0]}`,
    '--tokenizer',
    'none',
    '--router-mode',
    'kv',
    '--block-size',
    '16',
    '--log-level',
    'warn',
  ]);
  const gwUrl = `http://127.0.0.1:${gwPort}`;
  try {
    await waitReady(info.url, '/health');
    await waitReady(gwUrl, '/ready');
    const direct = new Pool(info.url, { connections: CONCURRENCY });
    const viaKvgate = new Pool(gwUrl, { connections: CONCURRENCY });
    await load(direct, model, 200, 1); // warm-up both paths
    await load(viaKvgate, model, 200, 2);
    const a: number[] = [];
    const b: number[] = [];
    const a1: number[] = [];
    const b1: number[] = [];
    for (let r = 0; r < ROUNDS; r++) {
      a.push(...(await load(direct, model, REQUESTS / ROUNDS, 10 + r)));
      b.push(...(await load(viaKvgate, model, REQUESTS / ROUNDS, 10 + r)));
      a1.push(...(await load(direct, model, 100, 20 + r, 1)));
      b1.push(...(await load(viaKvgate, model, 100, 20 + r, 1)));
    }
    await direct.close();
    await viaKvgate.close();
    for (const s of [a, b, a1, b1]) s.sort((x, y) => x - y);
    const row = (name: string, s: number[], base?: number[]): BenchRow => ({
      name,
      p50Us: percentile(s, 0.5) * 1000,
      p99Us: percentile(s, 0.99) * 1000,
      opsPerSec: 0,
      ...(base === undefined
        ? {}
        : {
            note:
              `+${(percentile(s, 0.5) - percentile(base, 0.5)).toFixed(2)} ms at p50 (${(percentile(s, 0.5) / percentile(base, 0.5)).toFixed(2)}x), ` +
              `${percentile(s, 0.99) >= percentile(base, 0.99) ? '+' : ''}${(percentile(s, 0.99) - percentile(base, 0.99)).toFixed(2)} ms at p99`,
          }),
    });
    return {
      title,
      rows: [
        row(`TTFT, engine alone, ${CONCURRENCY} concurrent`, a),
        row(`TTFT, through kvgate serve (kv mode, events on), ${CONCURRENCY} concurrent`, b, a),
        row('TTFT, engine alone, 1 at a time', a1),
        row('TTFT, through kvgate serve, 1 at a time', b1, a1),
      ],
      notes: [
        `${a.length} + ${b.length} requests at ${CONCURRENCY} concurrent and ${a1.length} + ${b1.length} one at a time (ops/s column unused); engine: mocker --speedup 100, prompts of 576 tokens, max_tokens 8`,
        'the gateway hashes token-id prompts on its preprocessing thread, routes, and passes SSE through untouched',
      ],
    };
  } finally {
    gateway.child.kill('SIGTERM');
    mocker.child.kill('SIGTERM');
  }
}
