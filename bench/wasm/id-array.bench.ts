/**
 * A completion's prompt of token ids read from the body's bytes (`jsonIdArray`), against `JSON.parse` of the same
 * array's text then `Uint32Array.from` measured in the same run (the text already decoded: the baseline is spared
 * the UTF-8 decoding the gateway would pay). `KVGATE_BENCH_IDS` ids (default 123,500, an agent's 128k-token
 * conversation; seeded, up to 151,643, a Qwen vocabulary) laid out three ways: `,` (JSON.stringify), `, ` (Python's
 * json.dumps) and one id a line indented (pretty-printed). Outputs are checked equal before timing.
 *
 * Steady state is what the table's rows time; a preprocessing thread also pays the optimizing compiler's warm-up on
 * its first calls, so the first three calls in fresh worker threads are timed too (median of five threads).
 *
 * With `KVG_BENCH_BASE` naming another built checkout, its `jsonIdArray` is timed in the same run too (from its
 * `src/wasm`, or from `src/common` where a checkout before the module's reader kept the JavaScript one).
 *
 * Run: [KVG_BENCH_BASE=<built checkout>] node --expose-gc dist/bench/run.js wasm/id-array
 */
import { resolve } from 'node:path';
import { Worker } from 'node:worker_threads';
import { existsSync } from 'node:fs';
import { seededRng } from '../../src/common/index.js';
import { jsonIdArray } from '../../src/wasm/index.js';
import { envIntList, ratio, timeAll, type BenchRow, type BenchSection } from '../util.js';

export const title = "A token-id prompt read from the body's bytes: jsonIdArray vs JSON.parse + Uint32Array.from";

const LAYOUTS = [
  { name: "','", join: ',' },
  { name: "', '", join: ', ' },
  { name: 'a line each', join: ',\n    ' },
];

interface Body {
  readonly name: string;
  readonly bytes: Buffer;
  readonly start: number;
  readonly array: string;
}

function bodies(count: number): { ids: number[]; list: Body[] } {
  const rnd = seededRng(7);
  const ids = Array.from({ length: count }, () => Math.floor(rnd() * 151_644));
  const list = LAYOUTS.map(({ name, join }) => {
    const array = `[${ids.join(join)}]`;
    const head = '{"model":"qwen3","prompt":';
    return { name, bytes: Buffer.from(`${head}${array},"max_tokens":1}`), start: head.length, array };
  });
  return { ids, list };
}

function check(ids: number[], body: Body): void {
  const read = jsonIdArray(body.bytes, body.start);
  const same = read !== undefined && read.ids.length === ids.length && read.ids.every((id, i) => id === ids[i]);
  if (!same || read.end !== body.start + body.array.length)
    throw new Error(`jsonIdArray misread the ${body.name} body`);
}

/**
 * The first three calls' milliseconds in a fresh worker thread: the warm-up a preprocessing thread pays once. A
 * one-id array is read first, untimed: a preprocessing thread has instantiated the module (it hashes with it) before
 * its first long prompt.
 */
function coldCalls(body: Body): Promise<number[]> {
  const url = new URL('../../src/wasm/index.js', import.meta.url).href;
  const code = `
    const { parentPort, workerData } = require('node:worker_threads');
    import(workerData.url).then(({ jsonIdArray }) => {
      const bytes = Buffer.from(workerData.bytes);
      jsonIdArray(Buffer.from('[1]'), 0);
      const ms = [];
      for (let k = 0; k < 3; k++) {
        const t0 = process.hrtime.bigint();
        jsonIdArray(bytes, workerData.start);
        ms.push(Number(process.hrtime.bigint() - t0) / 1e6);
      }
      parentPort.postMessage(ms);
    });`;
  const worker = new Worker(code, { eval: true, workerData: { url, bytes: body.bytes, start: body.start } });
  return new Promise((res, rej) => {
    worker.once('message', (ms: number[]) => void worker.terminate().then(() => res(ms)));
    worker.once('error', rej);
  });
}

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[xs.length >> 1]!;

export async function run(): Promise<BenchSection> {
  const [count] = envIntList('KVGATE_BENCH_IDS', [123_500]);
  const { ids, list } = bodies(count!);
  const baseDir = process.env.KVG_BENCH_BASE;
  const baseFile = (dir: string): string => {
    const inWasm = resolve(dir, 'dist/src/wasm/id-array.js');
    return existsSync(inWasm) ? inWasm : resolve(dir, 'dist/src/common/json-ids.js');
  };
  const base =
    baseDir === undefined
      ? undefined
      : ((await import(baseFile(baseDir))) as { jsonIdArray: typeof jsonIdArray }).jsonIdArray;
  const fns: Record<string, () => unknown> = {};
  for (const body of list) {
    check(ids, body);
    fns[`jsonIdArray, ${body.name}`] = () => jsonIdArray(body.bytes, body.start);
    if (base !== undefined) fns[`base's jsonIdArray, ${body.name}`] = () => base(body.bytes, body.start);
    fns[`JSON.parse + Uint32Array.from, ${body.name}`] = () => Uint32Array.from(JSON.parse(body.array) as number[]);
  }
  const rows = await timeAll(fns);
  const byName = new Map(rows.map((r) => [r.name, r]));
  const notes: string[] = [];
  for (const body of list) {
    const ours = byName.get(`jsonIdArray, ${body.name}`)!;
    const parse = byName.get(`JSON.parse + Uint32Array.from, ${body.name}`)!;
    const perByte = (r: BenchRow): string => `${((r.p50Us * 1000) / body.array.length).toFixed(2)} ns/byte`;
    ours.note = `${perByte(ours)} of ${body.array.length.toLocaleString('en-US')}; ${ratio(parse.p50Us, ours.p50Us)} faster`;
    parse.note = perByte(parse);
    const before = byName.get(`base's jsonIdArray, ${body.name}`);
    if (before !== undefined)
      before.note = `${perByte(before)}; ${ratio(before.p50Us, ours.p50Us)} the time of this tree's`;
    const cold: number[][] = [];
    for (let t = 0; t < 5; t++) cold.push(await coldCalls(body));
    const calls = [0, 1, 2].map((k) => `${median(cold.map((c) => c[k]!)).toFixed(2)} ms`);
    notes.push(`${body.name}: a fresh thread's first three calls take ${calls.join(', ')} (median of five threads)`);
  }
  notes.push(`${count!.toLocaleString('en-US')} ids; ns/byte: the median call over the array's bytes`);
  return { title, rows, notes };
}
