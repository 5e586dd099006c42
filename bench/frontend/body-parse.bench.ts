/**
 * A request body's parse on the gateway (`parseBodyObject`: JSON.parse, the nesting bound, and the search for a
 * lone UTF-16 surrogate escape, which walks the parsed body only where the text has one): an agent turn's body
 * of about 640 KB sent as raw UTF-8, and the same sent with `\u` escapes (as Python's json.dumps writes
 * non-ASCII text by default). JSON.parse alone is the floor of every row.
 *
 * With `KVG_BENCH_BASE` naming another built checkout, its `parseBodyObject` parses the same bodies in the same
 * run (before the surrogate search: the nesting bound alone).
 *
 * Run: [KVG_BENCH_BASE=<built checkout>] node --expose-gc dist/bench/run.js frontend/body-parse
 */
import { resolve } from 'node:path';
import { parseBodyObject } from '../../src/frontend/body.js';
import { ratio, timeAll, type BenchRow, type BenchSection } from '../util.js';

export const title = "A request body's parse: JSON.parse, the nesting bound and the lone-surrogate search";

function bodies(): Record<string, string> {
  const words = Array.from({ length: 90_000 }, (_, k) => `w${(k * 7919) % 100_003}`).join(' ');
  const raw = JSON.stringify({
    model: 'demo',
    messages: [
      { role: 'system', content: 'You are a coding agent. '.repeat(800) },
      { role: 'user', content: `${words} ünïcödé 😀` },
    ],
  });
  // Python's json.dumps: every non-ASCII UTF-16 code unit escaped (an emoji as its surrogate pair).
  const python = raw.replace(/[\u0080-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
  return { 'raw UTF-8': raw, '\\u escapes': python };
}

async function baseParse(): Promise<((text: string) => unknown) | undefined> {
  const dir = process.env.KVG_BENCH_BASE;
  if (dir === undefined) return undefined;
  const mod = (await import(resolve(dir, 'dist/src/frontend/body.js'))) as { parseBodyObject: typeof parseBodyObject };
  return mod.parseBodyObject;
}

export async function run(): Promise<BenchSection> {
  const base = await baseParse();
  const fns: Record<string, () => unknown> = {};
  for (const [name, text] of Object.entries(bodies())) {
    fns[`${name}: JSON.parse alone`] = () => JSON.parse(text);
    fns[`${name}: parseBodyObject`] = () => parseBodyObject(text);
    if (base !== undefined) fns[`${name}: base parseBodyObject`] = () => base(text);
  }
  const rows: BenchRow[] = await timeAll(fns, { time: 1500, warmupTime: 500 });
  const per = base !== undefined ? 3 : 2;
  for (let i = 0; i < rows.length; i += per) {
    rows[i + 1]!.note = `${ratio(rows[i + 1]!.p50Us, rows[i]!.p50Us)} JSON.parse alone`;
    if (base !== undefined) rows[i + 1]!.note += `; ${ratio(rows[i + 1]!.p50Us, rows[i + 2]!.p50Us)} the base's`;
  }
  const sizes = Object.entries(bodies()).map(([n, t]) => `${n} ${t.length.toLocaleString('en-US')} characters`);
  const notes = [`Bodies: ${sizes.join(', ')}.`];
  if (base === undefined) notes.push('Set KVG_BENCH_BASE to a built checkout to time the base in the same run.');
  return { title, rows, notes };
}
