/**
 * Preprocessing cost per request for an ~8k-token multi-turn chat (the Qwen3
 * tokenizer and chat template): render + tokenize + hash, with and without
 * the segment cache, on the main thread and in the piscina pool.
 *
 * Every request is the same conversation with a fresh last user message (as
 * in a real multi-turn chat: the history repeats, the newest turn does not),
 * so the segment cache can serve the history and never the newest turn.
 * "cold" disables the cache: the whole prompt is tokenized each time.
 * Results are checked equal across modes before timing.
 * Run: npm run bench -- frontend
 */
import { ModelPreprocessor } from '../../src/frontend/preprocess/model-preprocessor.js';
import { createPreprocessor, type Preprocessor } from '../../src/frontend/preprocess/preprocessor.js';
import type { ChatTask, PreprocessModelSpec } from '../../src/frontend/preprocess/protocol.js';
import { ratio, timeAll, type BenchRow, type BenchSection } from '../util.js';

export const title =
  'Gateway preprocessing: ~8k-token chat (Qwen3 template + tokenizer + block hashes), segment cache and pool';

const WORDS = [
  'the',
  'model',
  'cache',
  'router',
  'prefix',
  'token',
  'worker',
  'latency',
  'queue',
  'block',
  'engine',
  'prompt',
  'stream',
  'naïve',
  'größe',
  '東京',
  'data',
  'serve',
  '42',
  'réseau',
  'value',
  'shard',
  'replica',
  'event',
];

/** A seeded conversation of about `targetChars` characters (~4 characters per token for this text). */
function conversation(targetChars: number): { role: string; content: string }[] {
  let s = 12345;
  const rnd = (): number => {
    s = (s * 1103515245 + 12345) >>> 0;
    return s / 2 ** 32;
  };
  const sentence = (n: number): string => {
    const w: string[] = [];
    for (let i = 0; i < n; i++) w.push(WORDS[Math.floor(rnd() * WORDS.length)]!);
    return `${w.join(' ')}.`;
  };
  const messages = [{ role: 'system', content: sentence(60) }];
  let chars = messages[0]!.content.length;
  let turn = 0;
  while (chars < targetChars) {
    const content = Array.from({ length: 4 + Math.floor(rnd() * 8) }, () => sentence(12)).join(' ');
    messages.push({ role: turn % 2 === 0 ? 'user' : 'assistant', content });
    chars += content.length;
    turn++;
  }
  if (messages.at(-1)!.role === 'user') messages.push({ role: 'assistant', content: sentence(30) });
  return messages;
}

export async function run(): Promise<BenchSection> {
  const history = conversation(40_000);
  let n = 0;
  const task = (): ChatTask => ({
    kind: 'chat',
    model: 'demo',
    maxPromptTokens: 1 << 20,
    messages: [
      ...history,
      { role: 'user', content: `Question ${n++}: what does the router do with ${WORDS[n % WORDS.length]}?` },
    ],
  });
  const spec: PreprocessModelSpec = {
    name: 'demo',
    blockSize: 16,
    tokenizer: { kind: 'demo' },
    segmentCacheTokens: 2_000_000,
    segmentCacheBytes: 32 * 1024 * 1024,
  };
  const cold: PreprocessModelSpec = { ...spec, segmentCacheTokens: 0 };

  const mainCached = await ModelPreprocessor.create(spec);
  const mainCold = await ModelPreprocessor.create(cold);
  const pools: Preprocessor[] = [];
  const poolCached = await createPreprocessor([spec], { threads: 1 });
  const poolCold = await createPreprocessor([cold], { threads: 1 });
  pools.push(poolCached, poolCold);
  try {
    // Correctness before timing: every mode gives the same ids and hashes.
    const t = task();
    const ref = await mainCold.run(t);
    for (const r of [
      await mainCached.run(t),
      await mainCached.run(t),
      await poolCached.run(t),
      await poolCold.run(t),
    ]) {
      if (r.tokenIds.length !== ref.tokenIds.length || r.tokenIds.some((v, i) => v !== ref.tokenIds[i]))
        throw new Error('token ids differ between modes');
      if (r.hashes.seq.some((v, i) => v !== ref.hashes.seq[i])) throw new Error('hashes differ between modes');
    }
    const tokens = ref.tokenIds.length;

    // Stage breakdown (means over a few runs of each mode).
    const stages = async (
      run: () => Promise<{ stats: { renderUs: number; tokenizeUs: number; hashUs: number; cachedTokens: number } }>,
    ): Promise<string> => {
      let render = 0;
      let tok = 0;
      let hash = 0;
      let cached = 0;
      const k = 20;
      for (let i = 0; i < k; i++) {
        const { stats } = await run();
        render += stats.renderUs;
        tok += stats.tokenizeUs;
        hash += stats.hashUs;
        cached += stats.cachedTokens;
      }
      return `render ${(render / k / 1000).toFixed(2)} ms, tokenize ${(tok / k / 1000).toFixed(2)} ms, hash ${(hash / k / 1000).toFixed(2)} ms, ${Math.round(cached / k)} of ${tokens} tokens from cache`;
    };
    const rows: BenchRow[] = await timeAll(
      {
        'main thread, no segment cache': () => mainCold.run(task()),
        'main thread, segment cache (history cached)': () => mainCached.run(task()),
        'pool (1 thread), no segment cache': () => poolCold.run(task()),
        'pool (1 thread), segment cache': () => poolCached.run(task()),
      },
      { time: 3000, warmupTime: 500 },
    );
    // After timing, so the stage means are of warmed-up code like the rows.
    const coldStages = await stages(() => mainCold.run(task()));
    const cachedStages = await stages(() => mainCached.run(task()));
    const base = rows[0]!;
    for (const r of rows) r.note = `${ratio(base.p50Us, r.p50Us)} faster than main-thread cold (median)`;

    // Throughput with 8 requests in flight: the pool frees the event loop, the main thread does not.
    const burst = async (p: Pick<Preprocessor, 'run'>, total: number): Promise<number> => {
      const t0 = performance.now();
      let next = 0;
      await Promise.all(
        Array.from({ length: 8 }, async () => {
          while (next < total) {
            next++;
            await p.run(task());
          }
        }),
      );
      return total / ((performance.now() - t0) / 1000);
    };
    const inline = { run: (x: ChatTask) => mainCached.run(x) };
    const poolTwo = await createPreprocessor([spec], { threads: 2 });
    pools.push(poolTwo);
    // Each thread has its own segment cache and JIT state to warm up.
    await burst(poolTwo, 80);
    const rpsMain = await burst(inline, 200);
    const rpsPool1 = await burst(poolCached, 200);
    const rpsPool2 = await burst(poolTwo, 200);

    return {
      title,
      rows,
      notes: [
        `prompt: ${history.length + 1} messages, ${tokens} tokens, ${ref.hashes.local.length} blocks of 16.`,
        `stages without cache: ${coldStages}.`,
        `stages with cache: ${cachedStages}.`,
        `throughput with 8 requests in flight, segment cache on: main thread ${rpsMain.toFixed(0)} req/s, pool of 1 thread ${rpsPool1.toFixed(0)} req/s, pool of 2 threads ${rpsPool2.toFixed(0)} req/s (on this machine's cores).`,
        'The pool adds a structured clone of the messages in and a transfer of the typed arrays out; its gain is that the event loop stays free for I/O (streams of other requests) while templates render and prompts tokenize.',
      ],
    };
  } finally {
    await Promise.all(pools.map((p) => p.close()));
  }
}
