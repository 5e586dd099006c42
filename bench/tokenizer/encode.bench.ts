/**
 * Encoding cost of the Qwen3 tokenizer: the native `tokenizers` package against the JavaScript
 * `ByteLevelBpe` that `HfTokenizer.encode` uses, on a cold ~128k-token prompt and on a ~2k-token follow-up
 * piece (what an agent's next turn adds). The text is this repository's own README and sources (prose and
 * code, not a repeated paragraph), so the piece cache meets mostly new words on a cold prompt.
 *
 * "fresh encoder" builds a new `ByteLevelBpe` before each timed run (outside the timing): an empty piece
 * cache, the worst case. "warm" reuses one encoder, as a running gateway does. Ids are checked equal to the
 * native ones before timing. Median and slowest of `TOKENIZER_ITERS` runs (default 9).
 * `TOKENIZER_BASE=<a base build's dist directory>` (e.g. another checkout's `dist`) adds the base build's
 * `ByteLevelBpe` on the same texts, timed in turn with this build's, run by run: a before/after in one run.
 * The "split only" rows time the pre-tokenizer split alone on the same texts, the regex walk the encoder
 * falls back to against the `pretokenize.ts` scanner that replaces it for Qwen3's pattern.
 * Run: node --expose-gc dist/bench/run.js tokenizer/encode
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { Tokenizer } from 'tokenizers';
import { translateSplitRegex } from '../../src/tokenizer/bpe-regex.js';
import { ByteLevelBpe } from '../../src/tokenizer/byte-level-bpe.js';
import { scannerFor, type PieceScanner } from '../../src/tokenizer/pretokenize.js';
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

type Timing = { p50: number; max: number };
/** A timed function and what to do before each run of it (outside the timing). */
type Timed = { before?: () => void; fn: () => unknown };

/** Times each of `runs` `iters` times, in turn run by run, so that a noisy machine's drift hits all alike. */
async function timeInTurn(iters: number, runs: Timed[]): Promise<Timing[]> {
  const ms: number[][] = runs.map(() => []);
  for (let i = 0; i < iters; i++) {
    for (let k = 0; k < runs.length; k++) {
      runs[k]!.before?.();
      (globalThis as { gc?: () => void }).gc?.();
      const t0 = performance.now();
      await runs[k]!.fn();
      ms[k]!.push(performance.now() - t0);
    }
  }
  return ms.map((m) => ({ p50: median(m), max: Math.max(...m) }));
}

const row = (name: string, r: Timing, note: string): BenchRow => ({
  name,
  p50Us: r.p50 * 1000,
  p99Us: r.max * 1000,
  opsPerSec: 1000 / r.p50,
  note,
});

interface Encoder {
  encode(text: string, addSpecialTokens: boolean): number[] | undefined;
}
type EncoderClass = { fromJson(json: unknown): Encoder | { refused: string } };

/** The base build's `ByteLevelBpe`, when `TOKENIZER_BASE` names a build's dist directory. */
async function baseEncoder(): Promise<EncoderClass | undefined> {
  const dir = process.env.TOKENIZER_BASE;
  if (dir === undefined || dir === '') return undefined;
  const url = pathToFileURL(join(resolve(dir), 'src/tokenizer/byte-level-bpe.js')).href;
  return ((await import(url)) as { ByteLevelBpe: EncoderClass }).ByteLevelBpe;
}

/** The pre-tokenizer split by the sticky regex walk (the pattern matches everywhere): the number of pieces. */
function regexSplit(sticky: RegExp, text: string): number {
  let pieces = 0;
  for (let pos = 0; pos < text.length; pieces++) {
    sticky.lastIndex = pos;
    if (!sticky.test(text)) throw new Error(`no match at ${pos}`);
    const end = sticky.lastIndex;
    if (text.slice(pos, end).length === 0) throw new Error(`empty match at ${pos}`);
    pos = end;
  }
  return pieces;
}

/** The same split by the scanner. */
function scannerSplit(scan: PieceScanner, text: string): number {
  let pieces = 0;
  for (let pos = 0; pos < text.length; pieces++) {
    const end = scan(text, pos);
    if (text.slice(pos, end).length === 0) throw new Error(`empty match at ${pos}`);
    pos = end;
  }
  return pieces;
}

/** Qwen3's split pattern as the encoder compiles it, and its scanner. */
function qwenSplit(json: unknown): { sticky: RegExp; scan: PieceScanner } {
  const pattern = (json as { pre_tokenizer: { pretokenizers: { pattern: { Regex: string } }[] } }).pre_tokenizer
    .pretokenizers[0]!.pattern.Regex;
  const t = translateSplitRegex(pattern);
  if ('refused' in t) throw new Error(`Qwen3 split refused: ${t.refused}`);
  const scan = scannerFor(t.regex);
  if (scan === undefined) throw new Error('Qwen3 split has no scanner');
  return { sticky: new RegExp(t.regex.source, 'uy'), scan };
}

export async function run(): Promise<BenchSection> {
  const iters = Number(process.env.TOKENIZER_ITERS ?? 9);
  const path = demoTokenizerFiles().tokenizerJson;
  const json = JSON.parse(readFileSync(path, 'utf8')) as unknown;
  const builder = (cls: EncoderClass) => (): Encoder => {
    const b = cls.fromJson(json);
    if ('refused' in b) throw new Error(`Qwen3 refused: ${b.refused}`);
    return b;
  };
  const build = builder(ByteLevelBpe);
  const Base = await baseEncoder();
  const buildBase = Base === undefined ? undefined : builder(Base);
  const native = Tokenizer.fromFile(path);
  const text = corpus();
  const cold = sliceOfTokens(build() as ByteLevelBpe, text, 0, 128_000);
  const follow = sliceOfTokens(build() as ByteLevelBpe, text, cold.length, 2_000);
  const nativeIds = async (t: string): Promise<number[]> =>
    (await native.encode(t, null, { addSpecialTokens: false })).getIds();
  for (const t of [cold, follow]) {
    const want = (await nativeIds(t)).join();
    if (want !== build().encode(t, false)!.join()) throw new Error('JS ids differ from native');
    if (buildBase !== undefined && want !== buildBase().encode(t, false)!.join()) throw new Error('base ids differ');
  }
  const coldTokens = (await nativeIds(cold)).length;
  const followTokens = (await nativeIds(follow)).length;
  const t = `${coldTokens.toLocaleString('en-US')} tokens`;
  const f = `${followTokens.toLocaleString('en-US')} tokens`;
  const [nativeCold] = await timeInTurn(iters, [{ fn: () => nativeIds(cold) }]);
  const [nativeFollow] = await timeInTurn(iters * 5, [{ fn: () => nativeIds(follow) }]);
  const rows = [row(`native, cold prompt (${t})`, nativeCold!, 'baseline')];
  const builds: [string, () => Encoder][] = [['JS', build]];
  if (buildBase !== undefined) builds.push(['base JS', buildBase]);
  const fresh = builds.map(([, b]) => {
    let bpe = b();
    return { before: () => (bpe = b()), fn: () => bpe.encode(cold, false) };
  });
  const warm = builds.map(([, b]) => {
    const bpe = b();
    bpe.encode(text, false);
    return bpe;
  });
  const freshT = await timeInTurn(iters, fresh);
  const warmT = await timeInTurn(
    iters,
    warm.map((bpe) => ({ fn: () => bpe.encode(cold, false) })),
  );
  const followT = await timeInTurn(
    iters * 5,
    warm.map((bpe) => ({ fn: () => bpe.encode(follow, false) })),
  );
  const faster = (base: Timing, r: Timing): string => `${ratio(base.p50, r.p50)} faster than native`;
  builds.forEach(([name], k) =>
    rows.push(row(`${name}, fresh encoder (${t})`, freshT[k]!, faster(nativeCold!, freshT[k]!))),
  );
  builds.forEach(([name], k) =>
    rows.push(row(`${name}, warm piece cache (${t})`, warmT[k]!, faster(nativeCold!, warmT[k]!))),
  );
  rows.push(row(`native, follow-up piece (${f})`, nativeFollow!, 'baseline'));
  builds.forEach(([name], k) =>
    rows.push(row(`${name}, follow-up piece (${f})`, followT[k]!, faster(nativeFollow!, followT[k]!))),
  );
  const { sticky, scan } = qwenSplit(json);
  for (const [label, s, n] of [
    [t, cold, iters],
    [f, follow, iters * 5],
  ] as const) {
    const [byRegex, byScanner] = await timeInTurn(n, [
      { fn: () => regexSplit(sticky, s) },
      { fn: () => scannerSplit(scan, s) },
    ]);
    rows.push(row(`split only, regex walk (${label})`, byRegex!, 'baseline'));
    rows.push(
      row(`split only, scanner (${label})`, byScanner!, `${ratio(byRegex!.p50, byScanner!.p50)} faster than the regex`),
    );
  }
  return {
    title,
    rows,
    notes: [
      `p99 column: the slowest of ${iters} runs (${iters * 5} for the follow-up piece); ids checked equal to native first`,
      'native is wall time of the async call (its work runs on a libuv thread); JS runs on the calling thread',
      ...(Base === undefined
        ? []
        : [`base JS: the ByteLevelBpe of ${process.env.TOKENIZER_BASE}, timed in turn with this build's`]),
    ],
  };
}
