/**
 * Encoding cost of the Qwen3 tokenizer: the native `tokenizers` package against the JavaScript
 * `ByteLevelBpe` that `HfTokenizer.encode` uses, on a cold ~128k-token prompt and on a ~2k-token follow-up
 * piece (what an agent's next turn adds). The text is this repository's own README and sources (prose and
 * code, not a repeated paragraph), so the piece cache meets mostly new words on a cold prompt.
 *
 * "fresh encoder" builds a new `ByteLevelBpe` before each timed run (outside the timing): an empty piece
 * cache, the worst case. "warm" reuses one encoder, as a running gateway does. Ids are checked equal to the
 * native ones before timing. Median and slowest of `TOKENIZER_ITERS` runs (default 9).
 * Run: node --expose-gc dist/bench/run.js tokenizer/encode
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Tokenizer } from 'tokenizers';
import { ByteLevelBpe } from '../../src/tokenizer/byte-level-bpe.js';
import { demoTokenizerFiles } from '../../src/tokenizer/index.js';
import { ratio, type BenchRow, type BenchSection } from '../util.js';

export const title = 'Tokenizer encode: native tokenizers vs the JavaScript byte-level BPE (Qwen3)';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));

/** README, docs and every source file of the repository, in a fixed order. */
function corpus(): string {
  const parts = [readFileSync(join(ROOT, 'README.md'), 'utf8')];
  for (const dir of ['src', 'docs', 'bench', 'test']) {
    const files = (readdirSync(join(ROOT, dir), { recursive: true }) as string[])
      .filter((f) => f.endsWith('.ts') || f.endsWith('.md'))
      .sort();
    for (const f of files) parts.push(readFileSync(join(ROOT, dir, f), 'utf8'));
  }
  return parts.join('\n');
}

/** The shortest prefix of `text` from `start` that holds at least `tokens` tokens (by the JS encoder). */
function sliceOfTokens(bpe: ByteLevelBpe, text: string, start: number, tokens: number): string {
  let len = tokens * 3;
  while (start + len < text.length && bpe.encode(text.slice(start, start + len), false)!.length < tokens)
    len += tokens / 8;
  return text.slice(start, start + len);
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

async function timeRuns(iters: number, before: () => void, fn: () => unknown): Promise<{ p50: number; max: number }> {
  const ms: number[] = [];
  for (let i = 0; i < iters; i++) {
    before();
    (globalThis as { gc?: () => void }).gc?.();
    const t0 = performance.now();
    await fn();
    ms.push(performance.now() - t0);
  }
  return { p50: median(ms), max: Math.max(...ms) };
}

const row = (name: string, r: { p50: number; max: number }, note: string): BenchRow => ({
  name,
  p50Us: r.p50 * 1000,
  p99Us: r.max * 1000,
  opsPerSec: 1000 / r.p50,
  note,
});

export async function run(): Promise<BenchSection> {
  const iters = Number(process.env.TOKENIZER_ITERS ?? 9);
  const path = demoTokenizerFiles().tokenizerJson;
  const json = JSON.parse(readFileSync(path, 'utf8')) as unknown;
  const build = (): ByteLevelBpe => {
    const b = ByteLevelBpe.fromJson(json);
    if (!(b instanceof ByteLevelBpe)) throw new Error(`Qwen3 refused: ${b.refused}`);
    return b;
  };
  const native = Tokenizer.fromFile(path);
  const text = corpus();
  let bpe = build();
  const cold = sliceOfTokens(bpe, text, 0, 128_000);
  const follow = sliceOfTokens(bpe, text, cold.length, 2_000);
  const nativeIds = async (t: string): Promise<number[]> =>
    (await native.encode(t, null, { addSpecialTokens: false })).getIds();
  for (const t of [cold, follow]) {
    if ((await nativeIds(t)).join() !== build().encode(t, false)!.join()) throw new Error('JS ids differ from native');
  }
  const coldTokens = (await nativeIds(cold)).length;
  const followTokens = (await nativeIds(follow)).length;
  const warm = build();
  warm.encode(text, false);
  const nothing = (): void => undefined;
  const r = {
    nativeCold: await timeRuns(iters, nothing, () => nativeIds(cold)),
    jsFresh: await timeRuns(
      iters,
      () => (bpe = build()),
      () => bpe.encode(cold, false),
    ),
    jsWarm: await timeRuns(iters, nothing, () => warm.encode(cold, false)),
    nativeFollow: await timeRuns(iters * 5, nothing, () => nativeIds(follow)),
    jsFollow: await timeRuns(iters * 5, nothing, () => warm.encode(follow, false)),
  };
  const t = `${coldTokens.toLocaleString('en-US')} tokens`;
  const f = `${followTokens.toLocaleString('en-US')} tokens`;
  return {
    title,
    rows: [
      row(`native, cold prompt (${t})`, r.nativeCold, 'baseline'),
      row(`JS, fresh encoder (${t})`, r.jsFresh, `${ratio(r.nativeCold.p50, r.jsFresh.p50)} faster than native`),
      row(`JS, warm piece cache (${t})`, r.jsWarm, `${ratio(r.nativeCold.p50, r.jsWarm.p50)} faster than native`),
      row(`native, follow-up piece (${f})`, r.nativeFollow, 'baseline'),
      row(`JS, follow-up piece (${f})`, r.jsFollow, `${ratio(r.nativeFollow.p50, r.jsFollow.p50)} faster than native`),
    ],
    notes: [
      `p99 column: the slowest of ${iters} runs (${iters * 5} for the follow-up piece); ids checked equal to native first`,
      'native is wall time of the async call (its work runs on a libuv thread); JS runs on the calling thread',
    ],
  };
}
