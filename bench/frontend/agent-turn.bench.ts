/**
 * The cost of an agent's turn: gateway CPU per request for conversations of
 * about 8k, 32k and 128k tokens (Qwen3 template and tokenizer), a cold prompt
 * of each size (a conversation the gateway has never seen) and follow-up
 * turns that each add about 2k tokens (an assistant answer and a user
 * message), as agents send them; plus the token-id path (a completion whose
 * prompt is the conversation's ids).
 *
 * Real processes: one `kvgate serve` per build (this tree, and the base build
 * named by `KVG_BENCH_BASE`, a checkout built with `npm run build`), each with
 * a `kvgate mocker` engine of its own (a shared engine's KV events would reach
 * both gateways, so one gateway's chat turn would cost the other CPU inside
 * the other's measured requests), each its own process, driven alternately request by
 * request so both see the same load. A request's CPU is the gateway
 * process's CPU time over it, summed over all its threads from
 * /proc/<pid>/task/<tid>/schedstat (nanoseconds; Linux only); requests are
 * sent one at a time, so each delta is that request's cost plus the process's
 * background work over it. The background (timers: the event-loop delay monitor wakes the main thread every 10 ms)
 * is measured on the idle gateway before the runs, as CPU per millisecond, and subtracted over each request's
 * window; on a slow virtual machine it reaches 12 ms of CPU a second. A request's CPU runs until the process is
 * quiet again (no more than its background over 25 ms, plus 0.1 ms), so what it left running (a chat turn's KV
 * events from its engine, decoded after its answer) is counted in it, not in the next.
 * `/v1/route` answers with
 * the decision without the prompt's ids (`return_token_ids: false`, as an agent that only routes asks; a base
 * build that predates the flag still writes them); `/v1/chat/completions` (max_tokens 1) goes to the engine.
 *
 * Sizes: `AGENT_SIZES` (thousands of tokens, default 8,32,128), `AGENT_TURNS`
 * follow-ups per size (default 8), `AGENT_COLD` cold prompts per size (3), `AGENT_WARM` unmeasured follow-ups (route,
 * chat and token ids) of eight 24k-token conversations before them (16), and `AGENT_WARM_SIZE` unmeasured follow-ups
 * (route and chat) at each size before its measured ones (4), so the figures are a warm gateway's. Then runs of
 * turns (`runsOfTurns`): follow-ups of several conversations sent back to back, a turn's CPU the process's over the
 * run divided by its turns (`AGENT_RUNS`, `AGENT_RUN_TURNS`, `AGENT_RUN_CONVERSATIONS`).
 * Then token-id prompts of several sessions of one app at once (`sessionsAtOnce`, `AGENT_SESSIONS`), and agents in
 * the gateway's steady state (`steadyTurns`: conversations grown turn by turn to the size; `AGENT_STEADY=0` leaves
 * them out).
 * `AGENT_CPU_PROF=<dir>` runs each gateway under `node --cpu-prof` (its main
 * thread and its preprocessing threads), writing the profiles under
 * `<dir>/<base|this>/` when the bench stops it.
 * Run: node --expose-gc dist/bench/run.js frontend/agent-turn
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import type { BenchRow, BenchSection } from '../util.js';
import {
  type Gateway,
  type Proc,
  lineOf,
  mainThreadCpuNs,
  measureIdle,
  processCpuNs,
  quiet,
  startCli,
  stopProc,
} from './gateway-process.js';

export const title = 'Agent turns: gateway CPU per request, cold and follow-up, 8k to 128k tokens (Qwen3)';

const HERE_ROOT = resolve(new URL('../../..', import.meta.url).pathname);
const MODEL = 'qwen3-demo';

const WORDS = (
  'the router sends each request to the worker holding the longest cached prefix of its prompt weighed against ' +
  'load while the engines report their cache events over zmq and agents run tools on files with ünïcode 日本語 names'
).split(' ');

function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => (s = (s * 1103515245 + 12345) >>> 0) / 2 ** 32;
}

/** About `n` tokens of text (these words are 1.2 tokens each on average). */
function para(rnd: () => number, n: number): string {
  const out: string[] = [];
  for (let i = 0; i < n / 1.2; i++) out.push(WORDS[Math.floor(rnd() * WORDS.length)]!);
  return out.join(' ');
}

type Message = { role: string; content: string };

/** A conversation of about `tokens` tokens ending with a user message. */
export function conversation(seed: number, tokens: number): { messages: Message[]; rnd: () => number } {
  const rnd = rng(seed);
  const messages: Message[] = [{ role: 'system', content: `You are a coding agent. ${para(rnd, 400)}` }];
  let n = 400;
  while (n < tokens - 1000) {
    messages.push({ role: messages.length % 2 === 1 ? 'user' : 'assistant', content: para(rnd, 1000) });
    n += 1000;
  }
  if (messages.length % 2 === 0) messages.push({ role: 'assistant', content: para(rnd, 100) });
  messages.push({ role: 'user', content: para(rnd, 1000) });
  return { messages, rnd };
}

async function startGateway(
  name: string,
  root: string,
  engine: Record<string, unknown>,
  dir: string,
): Promise<Gateway> {
  const file = join(dir, `${name}.json`);
  const kv = (engine.kv_events as string[])[0];
  writeFileSync(
    file,
    JSON.stringify({
      listen: { port: 0 },
      models: [
        { name: MODEL, tokenizer: 'demo', block_size: 16, workers: [{ id: 1, url: engine.url, kv_events: kv }] },
      ],
    }),
  );
  const profDir = process.env.AGENT_CPU_PROF;
  const nodeArgs =
    profDir === undefined || profDir === '' ? [] : ['--cpu-prof', `--cpu-prof-dir=${join(resolve(profDir), name)}`];
  const proc = startCli(root, ['serve', '--config', file], nodeArgs);
  const started = await lineOf(proc, (o) => o.msg === 'kvgate gateway started');
  return { name, proc, url: String(started.listen), idleNsPerMs: 0, idleMainNsPerMs: 0 };
}

interface Sample {
  cpuMs: number;
  /** Of it, the main thread's. */
  mainMs: number;
  wallMs: number;
  promptTokens: number;
  ids?: number[];
}

/**
 * Sends the bodies to `path` one after another, each as soon as the previous answer is in (or all at once, with
 * `together`), and charges them the process's CPU from before the first until it is quiet after the last, its
 * background subtracted: per body. Wall time is per body too (with `together`, the whole batch's over its bodies).
 */
async function measure(gw: Gateway, path: string, texts: string[], together = false): Promise<Sample> {
  const pid = gw.proc.child.pid!;
  await quiet(gw);
  const c0 = processCpuNs(pid);
  const m0 = mainThreadCpuNs(pid);
  const t0 = performance.now();
  const send = (text: string): Promise<Record<string, unknown>> => sendText(gw, path, text);
  const answers: Record<string, unknown>[] = [];
  if (together) answers.push(...(await Promise.all(texts.map(send))));
  else for (const text of texts) answers.push(await send(text));
  const wallMs = performance.now() - t0;
  // What the requests left running (a chat turn's KV events from its engine) is their cost too.
  await quiet(gw);
  const windowMs = performance.now() - t0;
  const n = texts.length;
  const promptTokens = (json: Record<string, unknown>): number =>
    Number(json.prompt_tokens ?? (json.usage as { prompt_tokens?: number } | undefined)?.prompt_tokens ?? 0);
  return {
    cpuMs: (processCpuNs(pid) - c0 - gw.idleNsPerMs * windowMs) / 1e6 / n,
    mainMs: (mainThreadCpuNs(pid) - m0 - gw.idleMainNsPerMs * windowMs) / 1e6 / n,
    wallMs: wallMs / n,
    promptTokens: median(answers.map(promptTokens)),
    ids: answers[n - 1]!.token_ids as number[] | undefined,
  };
}

/** One request, not measured: its answer. */
async function sendText(gw: Gateway, path: string, text: string): Promise<Record<string, unknown>> {
  const res = await fetch(`${gw.url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: text,
  });
  const json = (await res.json()) as Record<string, unknown>;
  if (res.status !== 200) throw new Error(`${gw.name} ${path}: ${res.status} ${JSON.stringify(json).slice(0, 300)}`);
  return json;
}

/** One request, measured alone. */
function post(gw: Gateway, path: string, body: unknown): Promise<Sample> {
  return measure(gw, path, [JSON.stringify(body)]);
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s.length === 0
    ? NaN
    : s.length % 2 === 1
      ? s[(s.length - 1) / 2]!
      : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
}

function envInt(name: string, dflt: number): number {
  const v = Number(process.env[name]);
  return Number.isFinite(v) && v > 0 ? v : dflt;
}

type Series = Map<string, Sample[]>;

/** `/v1/route` without the prompt's ids in its answer (`return_token_ids: false`). */
const LEAN = { return_token_ids: false };

function record(series: Series, key: string, s: Sample): void {
  const list = series.get(key) ?? [];
  list.push(s);
  series.set(key, list);
}

/** What this gateway's conversation caches hold, from its /metrics: bytes per cached conversation. */
async function memoryNote(gw: Gateway, size: number): Promise<string> {
  const text = await (await fetch(`${gw.url}/metrics`)).text();
  const value = (name: string): number => {
    const line = text.split('\n').find((l) => l.startsWith(`${name}{`));
    return line === undefined ? NaN : Number(line.slice(line.lastIndexOf(' ') + 1));
  };
  const bytes = value('kvgate_preprocess_conversation_cache_bytes');
  const entries = value('kvgate_preprocess_conversation_cache_entries');
  return `${gw.name}, after the ${size / 1000}k runs: ${entries} conversations cached in ${(bytes / 2 ** 20).toFixed(1)} MiB (accounted)`;
}

/**
 * Runs of turns, as agents send them: `AGENT_RUN_CONVERSATIONS` conversations (4) take turns sending follow-ups to
 * `/v1/route`, `AGENT_RUN_TURNS` each (4), every one sent as soon as the previous answer is in (most agents' follow-ups
 * come within a second of the previous answer). A turn's CPU is the process's over the whole run, its background
 * subtracted, divided by the run's turns. `AGENT_RUNS` runs (4), the gateways taking each run in turn; the
 * conversations grow through the runs to end at `size`.
 */
async function runsOfTurns(gateways: Gateway[], series: Series, size: number): Promise<void> {
  const runs = envInt('AGENT_RUNS', 4);
  const perConv = envInt('AGENT_RUN_TURNS', 4);
  const convs = Array.from({ length: envInt('AGENT_RUN_CONVERSATIONS', 4) }, (_, i) =>
    conversation(11 + size + i, size - runs * perConv * 2000),
  );
  for (const c of convs)
    for (const gw of gateways) await post(gw, '/v1/route', { model: MODEL, messages: c.messages, ...LEAN });
  for (let r = 0; r < runs; r++) {
    const bodies: string[] = [];
    for (let t = 0; t < perConv; t++)
      for (const c of convs) {
        c.messages.push({ role: 'assistant', content: para(c.rnd, 1000) });
        c.messages.push({ role: 'user', content: para(c.rnd, 1000) });
        bodies.push(JSON.stringify({ model: MODEL, messages: c.messages, ...LEAN }));
      }
    for (const gw of gateways)
      record(series, `${gw.name}|run of turns ${size / 1000}k|route`, await measure(gw, '/v1/route', bodies));
  }
}

/**
 * Agents in a gateway's steady state: `AGENT_STEADY_CONVERSATIONS` conversations (8) grow from a quarter of `size`
 * by follow-ups of ~2k tokens, sent back to back to `/v1/route` and not measured, as a session that reaches `size`
 * has grown turn by turn through the gateway (and as a gateway in service has compiled its hot paths: V8 keeps
 * optimizing functions of the follow-up path, on its compiler threads, for a few hundred such turns). Then
 * `AGENT_STEADY_RUNS` runs (4), the gateways taking each in turn, of two follow-ups per conversation sent back to
 * back, measured as runs of turns are: each conversation's last 8 follow-ups (16k tokens with 4 runs), the last
 * ending at `size`. The note counts the main thread's full collections over the measured turns.
 */
async function steadyTurns(gateways: Gateway[], series: Series, size: number, notes: string[]): Promise<void> {
  const runs = envInt('AGENT_STEADY_RUNS', 4);
  const convs = Array.from({ length: envInt('AGENT_STEADY_CONVERSATIONS', 8) }, (_, i) =>
    conversation(23 + size + i, Math.max(2000, size / 4)),
  );
  const follow = (c: (typeof convs)[number]): string => {
    c.messages.push({ role: 'assistant', content: para(c.rnd, 1000) });
    c.messages.push({ role: 'user', content: para(c.rnd, 1000) });
    return JSON.stringify({ model: MODEL, messages: c.messages, ...LEAN });
  };
  const measuredTokens = runs * 2 * 2000;
  for (let grown = Math.max(2000, size / 4); grown < size - measuredTokens; grown += 2000)
    for (const c of convs) {
      const text = follow(c);
      for (const gw of gateways) await sendText(gw, '/v1/route', text);
    }
  const gc = new Map(gateways.map((gw) => [gw.name, { turns: 0, major: 0, ms: 0 }]));
  for (let r = 0; r < runs; r++) {
    const bodies: string[] = [];
    for (let t = 0; t < 2; t++) for (const c of convs) bodies.push(follow(c));
    for (const gw of gateways) {
      const before = await mainThreadGc(gw);
      record(series, `${gw.name}|steady state ${size / 1000}k|route`, await measure(gw, '/v1/route', bodies));
      const after = await mainThreadGc(gw);
      const tally = gc.get(gw.name)!;
      tally.turns += bodies.length;
      tally.major += after.major - before.major;
      tally.ms += after.ms - before.ms;
    }
  }
  for (const [name, t] of gc)
    notes.push(
      `${name}, steady state ${size / 1000}k: ${t.major} full (mark-compact) collections of the main thread's heap ` +
        `over ${t.turns} turns, ${(t.ms / t.turns).toFixed(2)} ms of its GC pauses a turn (nodejs_gc_duration_seconds)`,
    );
}

/** The main thread's garbage collections so far, from the gateway's /metrics: full collections, and all pauses. */
async function mainThreadGc(gw: Gateway): Promise<{ major: number; ms: number }> {
  const text = await (await fetch(`${gw.url}/metrics`)).text();
  let major = 0;
  let seconds = 0;
  for (const line of text.split('\n')) {
    if (line.startsWith('nodejs_gc_duration_seconds_count{kind="major"')) major += Number(line.split(' ').pop());
    else if (line.startsWith('nodejs_gc_duration_seconds_sum{')) seconds += Number(line.split(' ').pop());
  }
  return { major, ms: seconds * 1000 };
}

/**
 * Token-id prompts of `AGENT_SESSIONS` (8) sessions of one app sent at once, as concurrent agents send them: each
 * the conversation's ids with its last 3,000 replaced by the session's own, so all begin with the same ids (the
 * app's system prompt and tools). Their wall time shows whether the preprocessing threads share them. Four batches.
 */
async function sessionsAtOnce(gateways: Gateway[], series: Series, size: number, ids: number[]): Promise<void> {
  const rnd = rng(size + 17);
  const sessions = envInt('AGENT_SESSIONS', 8);
  for (let batch = 0; batch < 4; batch++) {
    const bodies = Array.from({ length: sessions }, () => {
      const prompt = [...ids.slice(0, -3000), ...Array.from({ length: 3000 }, () => Math.floor(rnd() * 150_000))];
      return JSON.stringify({ model: MODEL, prompt, ...LEAN });
    });
    for (const gw of gateways)
      record(
        series,
        `${gw.name}|token ids ${size / 1000}k, ${sessions} sessions at once|route`,
        await measure(gw, '/v1/route', bodies, true),
      );
  }
}

/** Runs every case on each gateway in turn, request by request. */
async function drive(gateways: Gateway[], series: Series, notes: string[]): Promise<void> {
  const sizes = (process.env.AGENT_SIZES ?? '8,32,128').split(',').map((s) => Number(s) * 1000);
  const turns = envInt('AGENT_TURNS', 8);
  const colds = envInt('AGENT_COLD', 3);
  // Unmeasured turns first, as a gateway in service has had them: a fresh process, and each of its preprocessing
  // threads, compiles its hot paths (V8's compiler threads, counted in the process's CPU) over its first requests.
  // The turns take eight conversations in turn, so that they reach every thread (a conversation keeps to one).
  const warms = Array.from({ length: 8 }, (_, i) => conversation(3 + i, 24_000));
  for (let t = 0; t < envInt('AGENT_WARM', 16); t++) {
    const warm = warms[t % warms.length]!;
    warm.messages.push({ role: 'assistant', content: para(warm.rnd, 1000) });
    warm.messages.push({ role: 'user', content: para(warm.rnd, 1000) });
    const path = t % 2 === 0 ? '/v1/route' : '/v1/chat/completions';
    const body = { model: MODEL, messages: warm.messages, max_tokens: 1, ...(t % 2 === 0 ? LEAN : {}) };
    for (const gw of gateways) await post(gw, path, body);
    const ids = (await post(gateways[0]!, '/v1/route', { model: MODEL, messages: warm.messages })).ids!;
    for (const gw of gateways) await post(gw, '/v1/route', { model: MODEL, prompt: ids, ...LEAN });
  }
  for (const size of sizes) {
    // Unmeasured follow-ups at this size on a conversation of their own: what is compiled only once a prompt is this
    // long (loops that grow hot with the context) is compiled here, as in a gateway that has served such turns.
    const warm = conversation(5 + size, size - 8000);
    for (const gw of gateways) await post(gw, '/v1/route', { model: MODEL, messages: warm.messages, ...LEAN });
    for (let t = 0; t < envInt('AGENT_WARM_SIZE', 4); t++) {
      warm.messages.push({ role: 'assistant', content: para(warm.rnd, 1000) });
      warm.messages.push({ role: 'user', content: para(warm.rnd, 1000) });
      const path = t % 2 === 0 ? '/v1/route' : '/v1/chat/completions';
      const body = { model: MODEL, messages: warm.messages, max_tokens: 1, ...(t % 2 === 0 ? LEAN : {}) };
      for (const gw of gateways) await post(gw, path, body);
    }
    // Follow-ups end at `size`: start 2k tokens a turn below it.
    for (let c = 0; c < colds; c++) {
      const { messages } = conversation(1000 * size + c, size);
      for (const gw of gateways)
        record(
          series,
          `${gw.name}|cold ${size / 1000}k|route`,
          await post(gw, '/v1/route', { model: MODEL, messages, ...LEAN }),
        );
    }
    const conv = conversation(7 + size, size - turns * 2000);
    for (const gw of gateways) await post(gw, '/v1/route', { model: MODEL, messages: conv.messages });
    for (let t = 0; t < turns; t++) {
      conv.messages.push({ role: 'assistant', content: para(conv.rnd, 1000) });
      conv.messages.push({ role: 'user', content: para(conv.rnd, 1000) });
      const path = t % 2 === 0 ? '/v1/route' : '/v1/chat/completions';
      // An agent routing its turns asks for the decision alone (a base that predates the flag answers the ids anyway).
      const body = { model: MODEL, messages: conv.messages, max_tokens: 1, ...(t % 2 === 0 ? LEAN : {}) };
      for (const gw of gateways)
        record(
          series,
          `${gw.name}|follow-up ${size / 1000}k|${path === '/v1/route' ? 'route' : 'chat'}`,
          await post(gw, path, body),
        );
    }
    // The token-id path: the conversation's ids (asked for once, not recorded) as a completion prompt, with a fresh
    // last token each time.
    const ids = (await post(gateways[0]!, '/v1/route', { model: MODEL, messages: conv.messages })).ids;
    for (let t = 0; ids !== undefined && t < turns; t++) {
      const prompt = [...ids.slice(0, -1), 100 + t];
      for (const gw of gateways)
        record(
          series,
          `${gw.name}|token ids ${size / 1000}k|route`,
          await post(gw, '/v1/route', { model: MODEL, prompt, ...LEAN }),
        );
    }
    if (ids !== undefined) await sessionsAtOnce(gateways, series, size, ids);
    await runsOfTurns(gateways, series, size);
    if (process.env.AGENT_STEADY !== '0') await steadyTurns(gateways, series, size, notes);
    for (const gw of gateways) if (gw.name !== 'base') notes.push(await memoryNote(gw, size));
  }
}

function rows(series: Series, gateways: Gateway[]): BenchRow[] {
  const out: BenchRow[] = [];
  const cases = [...new Set([...series.keys()].map((k) => k.slice(k.indexOf('|') + 1)))];
  for (const c of cases) {
    const base = series.get(`base|${c}`);
    for (const gw of gateways) {
      const s = series.get(`${gw.name}|${c}`) ?? [];
      const cpu = median(s.map((x) => x.cpuMs));
      const note =
        `gateway CPU median ${cpu.toFixed(1)} ms (main thread ${median(s.map((x) => x.mainMs)).toFixed(1)}, ` +
        `mean ${(s.reduce((a, x) => a + x.cpuMs, 0) / s.length).toFixed(1)}; n=${s.length}), ` +
        `~${Math.round(median(s.map((x) => x.promptTokens)))} tokens` +
        (base !== undefined && gw.name !== 'base'
          ? `, base CPU ${median(base.map((x) => x.cpuMs)).toFixed(1)} ms`
          : '');
      const walls = s.map((x) => x.wallMs).sort((a, b) => a - b);
      out.push({
        name: `${gw.name}: ${c.replace('|', ' ')}`,
        p50Us: median(walls) * 1000,
        p99Us: (walls[walls.length - 1] ?? NaN) * 1000,
        opsPerSec: 1000 / median(walls),
        note,
      });
    }
  }
  return out;
}

export async function run(): Promise<BenchSection> {
  const dir = mkdtempSync(join(tmpdir(), 'kvgate-agent-bench-'));
  const procs: Proc[] = [];
  try {
    // One engine per gateway: an engine's KV events reach every gateway subscribed to it, so with a shared engine one
    // gateway's chat turn would cost the other CPU (decoding the events) inside the other's measured requests.
    const startEngine = async (): Promise<Record<string, unknown>> => {
      const mockerArgs = `mocker --model ${MODEL} --port 0 --kv-events-port 0 --bootstrap-port 0 --speedup 1000`;
      const mocker = startCli(HERE_ROOT, [
        ...mockerArgs.split(' '),
        '--max-model-len',
        '200000',
        '--tokenizer',
        'demo',
      ]);
      procs.push(mocker);
      return lineOf(mocker, (o) => typeof o.url === 'string');
    };
    const gateways: Gateway[] = [];
    const baseRoot = process.env.KVG_BENCH_BASE;
    if (baseRoot !== undefined && baseRoot !== '')
      gateways.push(await startGateway('base', resolve(baseRoot), await startEngine(), dir));
    gateways.push(await startGateway('this', HERE_ROOT, await startEngine(), dir));
    procs.push(...gateways.map((g) => g.proc));
    const series: Series = new Map();
    // Warm-up (JIT, first connections): small chats, not recorded.
    for (let i = 0; i < 20; i++)
      for (const gw of gateways)
        await post(gw, '/v1/route', { model: MODEL, messages: conversation(i, 1500).messages });
    const idle: string[] = [];
    for (const gw of gateways) idle.push(await measureIdle(gw));
    const memory: string[] = [];
    await drive(gateways, series, memory);
    const notes = [
      ...idle,
      ...memory,
      'wall = client round trip (median, max in the p99 column); gateway CPU = the serve process over the request, all threads',
      'run of turns: per turn, over a run of follow-ups sent back to back (wall and CPU of the run divided by its turns)',
      'sessions at once: per prompt, over a batch of token-id prompts sent together (wall and CPU of the batch divided by its prompts)',
      'follow-up: the conversation plus an assistant answer and a user message (~2k tokens); cold: a conversation never seen',
      `base: ${baseRoot ?? '(not run: set KVG_BENCH_BASE to a built checkout of the base commit)'}`,
    ];
    return { title, rows: rows(series, gateways), notes };
  } finally {
    for (const p of procs.reverse()) await stopProc(p);
    rmSync(dir, { recursive: true, force: true });
  }
}
