/**
 * A large body's passes outside rendering and tokenizing, this tree against the base build named by
 * `KVG_BENCH_BASE` (its dist/ modules loaded in this process), CPU time of this thread, median of
 * `FORWARD_RUNS` (default 200) calls each, the two builds alternating:
 *
 * - the engine's body of a ~128k-token agent chat (the agent-turn bench's conversation, non-ASCII): the base
 *   sends the body's text back from the preprocessing thread (its structured clone here), writes the engine's body
 *   by joining slices of it and undici encodes that string to UTF-8; this tree joins views of the client's bytes
 *   (`Buffer.concat`);
 * - the preprocessing thread's whole body task for the same chat (parse, members, outline, the template rendered;
 *   its ids reused from the conversation cache after the first call, so tokenizing drops out) and the structured
 *   clone of what its reply carries of the body (the base's text; this tree's members and outline);
 * - the same for a completion of ~123k token ids (`prompt` read from the bytes in this tree, parsed as JSON in the
 *   base).
 *
 * Run: KVG_BENCH_BASE=<built base checkout> node --expose-gc dist/bench/run.js frontend/forward-body
 */
import { resolve } from 'node:path';
import type { BenchRow, BenchSection } from '../util.js';
import { conversation } from './agent-turn.bench.js';

export const title = "A large body's passes: the engine's body from the client's bytes, and the token-id prompt (CPU)";

const HERE_DIST = resolve(new URL('../..', import.meta.url).pathname);
const MODEL = 'qwen3-demo';

interface Build {
  name: string;
  handler: (task: unknown) => Promise<{ ok: boolean; body?: { forward: Record<string, unknown> } }>;
  /** The engine's body of a body task's reply, as bytes undici writes (the text encoded in the base). */
  engineBody: (bytes: Uint8Array, forward: Record<string, unknown>, fields: Record<string, unknown>) => Uint8Array;
}

async function load(name: string, dist: string): Promise<Build> {
  const th = (await import(`${dist}/src/frontend/preprocess/task-handler.js`)) as {
    createTaskHandler: (specs: unknown[]) => Promise<Build['handler']>;
  };
  const common = (await import(`${dist}/src/common/index.js`)) as Record<string, (...a: unknown[]) => unknown>;
  const rb = (await import(`${dist}/src/engines/request-body.js`)) as Record<string, (...a: unknown[]) => unknown>;
  const handler = await th.createTaskHandler([
    // The gateway's caches, so a repeated chat is rendered but not tokenized again.
    {
      name: MODEL,
      blockSize: 16,
      tokenizer: { kind: 'demo' },
      segmentCacheTokens: 1 << 20,
      segmentCacheBytes: 2 ** 28,
      conversationCacheBytes: 2 ** 28,
    },
  ]);
  const engineBody: Build['engineBody'] = (bytes, f, fields) => {
    const lazy = common.lazyJsonObject!;
    const withMembers = common.withJsonMembers!;
    if (typeof f.text === 'string') {
      // The base: the text crossed back (its clone is the reply clone row), slices joined into a string, encoded by undici.
      const body = withMembers(lazy(f.text, f.members, f.light, f.outlines), { model: 'served' }) as object;
      return Buffer.from(rb.serializeBody!(body, fields) as string);
    }
    const body = withMembers(lazy(bytes, f.members, f.light, f.outlines), { model: 'served' }) as object;
    return rb.requestPayload!(body, fields) as Uint8Array;
  };
  return { name, handler, engineBody };
}

const cpuUs = (): number => {
  const u = process.cpuUsage();
  return u.user + u.system;
};

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[s.length >> 1]!;
}

function row(name: string, us: number[], note: string): BenchRow {
  const m = median(us);
  return {
    name,
    p50Us: m,
    p99Us: [...us].sort((a, b) => a - b)[Math.floor(us.length * 0.99)]!,
    opsPerSec: 1e6 / m,
    note,
  };
}

function bodyTask(bytes: Uint8Array, endpoint: string): unknown {
  return {
    kind: 'body',
    endpoint,
    bytes,
    maxMessages: 100_000,
    headers: {},
    models: [{ name: MODEL, loraAdapters: [], adapters: [], maxPromptTokens: 400_000, workers: [{ id: 1 }] }],
  };
}

export async function run(): Promise<BenchSection> {
  const runs = Number(process.env.FORWARD_RUNS ?? 200);
  const builds = [await load('this', `${HERE_DIST}`)];
  const baseRoot = process.env.KVG_BENCH_BASE;
  if (baseRoot !== undefined && baseRoot !== '') builds.unshift(await load('base', `${resolve(baseRoot)}/dist`));
  const chat = Buffer.from(
    JSON.stringify({ model: MODEL, messages: conversation(7, 128_000).messages, max_tokens: 1 }),
  );
  let s = 1;
  const ids = Array.from({ length: 123_000 }, () => (s = (s * 1103515245 + 12345) >>> 0) % 151_000);
  const tokens = Buffer.from(JSON.stringify({ model: MODEL, prompt: ids, return_token_ids: false }));
  const fields = { stream: true, stream_options: { include_usage: true }, return_token_ids: true };
  const series = new Map<string, number[]>();
  const note = (key: string, us: number): void => void (series.get(key) ?? series.set(key, []).get(key)!).push(us);
  for (const b of builds) await b.handler(bodyTask(chat, 'chat'));
  for (let i = 0; i < runs; i++) {
    for (const b of builds) {
      let t = cpuUs();
      const out = await b.handler(bodyTask(chat, 'chat'));
      note(`${b.name}|chat body task`, cpuUs() - t);
      // What crosses back to the main thread (the bytes are moved, not cloned).
      t = cpuUs();
      structuredClone({ ...out.body!.forward, bytes: undefined });
      note(`${b.name}|chat reply clone`, cpuUs() - t);
      t = cpuUs();
      const wire = b.engineBody(chat, out.body!.forward, fields);
      note(`${b.name}|chat engine body`, cpuUs() - t);
      if (wire.length < chat.length) throw new Error(`${b.name}: an engine body shorter than the client's`);
      t = cpuUs();
      const tok = await b.handler(bodyTask(tokens, 'route'));
      note(`${b.name}|token-id body task`, cpuUs() - t);
      if (!tok.ok) throw new Error(`${b.name}: the token-id body failed`);
    }
  }
  const rows: BenchRow[] = [];
  for (const key of ['chat engine body', 'chat reply clone', 'chat body task', 'token-id body task']) {
    const base = series.get(`base|${key}`);
    for (const b of builds) {
      const us = series.get(`${b.name}|${key}`)!;
      const ratio =
        base !== undefined && b.name !== 'base' ? `, ${(median(us) / median(base)).toFixed(2)}x the base` : '';
      rows.push(row(`${b.name}: ${key}`, us, `CPU median of ${us.length}${ratio}`));
    }
  }
  return {
    title,
    rows,
    notes: [
      `chat body: ${chat.length} bytes (${JSON.stringify(conversation(7, 128_000).messages).length} characters of messages); token-id body: ${tokens.length} bytes, ${ids.length} ids`,
      'the p99 column is the 99th percentile of the same CPU samples; ops/s is 1 / median',
      `base: ${baseRoot ?? '(not run: set KVG_BENCH_BASE to a built checkout of the base commit)'}`,
    ],
  };
}
