/**
 * The agentic workload, generated from a seed: coding-agent sessions whose
 * turns are closed loop (a turn is sent when the previous answer finished,
 * plus a tool pause), in the trace's block-id form so the rest of the replay
 * (tokens, bounds, engines) treats it like a recorded trace.
 *
 * Shape, and the published figure each parameter follows (see the README's
 * replay section):
 * - every session of an app starts with that app's prefix (system prompt and
 *   tool definitions), whole trace blocks shared by all its sessions;
 * - the context is append-only: each turn adds the previous answer and a tool
 *   result; past `contextLimit` it is compacted to the app prefix and a fresh
 *   summary (new blocks, so the cache must start again);
 * - turns per session: log-normal, median 43 (vLLM AgentX: median 43 turns,
 *   142k input and 444 output tokens, subagents in 44 % of sessions);
 * - subagents: in 44 % of sessions, 1 to 3 of the parent's turns spawn 1 to 4
 *   subagents that start from the same app prefix and run in parallel while
 *   the parent waits; the parent's next turn follows the last of them and
 *   appends their results;
 * - tool pauses: 86.5 % under 1 s, 95.1 % under 10 s, the rest user think
 *   time up to 2 minutes (vllm-project/router #285's same-agent gaps).
 *
 * A request's `arrivalMs` is its nominal time (session start, plus pauses and
 * a nominal service time per turn): it orders the requests for the bounds;
 * the replay sends a closed-loop turn at its dependencies' real finish plus
 * `pauseMs`.
 */
import { seededRng, type Rng, type SessionHint } from '../common/index.js';
import { KvgateError } from '../errors/index.js';
import type { ReplayRequest, Workload } from './workload.js';

export interface AgenticOptions {
  readonly seed: number;
  /** Top-level sessions (subagents come on top). */
  readonly sessions: number;
  /** Session starts per second (Poisson). */
  readonly sessionRatePerS: number;
  /** Distinct apps (one shared prefix each). */
  readonly apps: number;
  readonly traceBlockSize: number;
  /** Context (tokens) past which a session is compacted. */
  readonly contextLimit: number;
  /** Median turns of a top-level session. */
  readonly medianTurns: number;
}

export const AGENTIC_DEFAULTS: Omit<AgenticOptions, 'seed' | 'traceBlockSize'> = {
  sessions: 24,
  sessionRatePerS: 0.5,
  apps: 4,
  contextLimit: 160_000,
  medianTurns: 43,
};

/** Median output tokens per turn (AgentX: 444). */
const MEDIAN_OUTPUT = 444;
/** Median tool-result tokens appended per turn (not published; a file read or a command's output). */
const MEDIAN_TOOL_RESULT = 1500;
/** Tokens a compaction leaves after the app prefix. */
const SUMMARY_TOKENS = 8000;
/** Share of sessions with subagents (AgentX: 44 %). */
const SUBAGENT_SESSION_SHARE = 0.44;
const MEDIAN_SUBAGENT_TURNS = 8;
/** Nominal ms per output token and per prompt token, only to order requests for the bounds. */
const NOMINAL_MS_PER_OUTPUT = 20;
const NOMINAL_MS_PER_PROMPT = 0.05;

/** Standard normal draw (Box-Muller). */
function normal(rng: Rng): number {
  const u = Math.max(rng(), 1e-12);
  return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * rng());
}

function logNormal(rng: Rng, median: number, sigma: number, min: number, max: number): number {
  return Math.min(max, Math.max(min, Math.round(median * Math.exp(sigma * normal(rng)))));
}

/** A tool pause in ms: 86.5 % under 1 s, 8.6 % 1-10 s, 4.9 % 10-120 s (log-uniform within each band). */
export function toolPauseMs(rng: Rng): number {
  const u = rng();
  const logUniform = (lo: number, hi: number): number => lo * Math.exp(Math.log(hi / lo) * rng());
  if (u < 0.865) return logUniform(50, 1000);
  if (u < 0.951) return logUniform(1000, 10_000);
  return logUniform(10_000, 120_000);
}

/** One session's context as trace blocks: ids stand for their whole prefix; the last block may be partial. */
class Context {
  ids: number[];
  tokens: number;
  constructor(ids: readonly number[], tokens: number) {
    this.ids = [...ids];
    this.tokens = tokens;
  }
}

interface Draft {
  nominalMs: number;
  inputLength: number;
  outputLength: number;
  hashIds: readonly number[];
  after: { readonly drafts: readonly number[]; readonly pauseMs: number } | undefined;
  session: SessionHint;
}

class Generator {
  readonly drafts: Draft[] = [];
  readonly #o: AgenticOptions;
  readonly #rng: Rng;
  #nextId = 1;
  #sessions = 0;
  readonly #appPrefixes: number[][] = [];

  constructor(o: AgenticOptions) {
    this.#o = o;
    this.#rng = seededRng(o.seed ^ 0x5a6e7c1d);
    for (let a = 0; a < o.apps; a++) {
      // System prompt and tools: 8k to 24k tokens, in whole blocks so every session shares them exactly.
      const blocks = Math.round((8000 + 16_000 * this.#rng()) / o.traceBlockSize);
      this.#appPrefixes.push(this.#fresh(Math.max(1, blocks)));
    }
  }

  #fresh(n: number): number[] {
    const out: number[] = [];
    for (let i = 0; i < n; i++) out.push(this.#nextId++);
    return out;
  }

  /** Appends `n` tokens: the partial last block is continued (same id), then fresh ids. */
  #append(ctx: Context, n: number): void {
    ctx.tokens += n;
    const need = Math.ceil(ctx.tokens / this.#o.traceBlockSize);
    if (need > ctx.ids.length) ctx.ids.push(...this.#fresh(need - ctx.ids.length));
  }

  #startContext(app: number, firstMessage: number): Context {
    const prefix = this.#appPrefixes[app]!;
    const ctx = new Context(prefix, prefix.length * this.#o.traceBlockSize);
    this.#append(ctx, firstMessage);
    return ctx;
  }

  /** One turn's request; returns its draft index. */
  #turn(ctx: Context, nominalMs: number, after: Draft['after'], session: SessionHint): number {
    const outputLength = logNormal(this.#rng, MEDIAN_OUTPUT, 0.8, 16, 4096);
    this.drafts.push({ nominalMs, inputLength: ctx.tokens, outputLength, hashIds: [...ctx.ids], after, session });
    return this.drafts.length - 1;
  }

  #serviceMs(d: Draft): number {
    return d.outputLength * NOMINAL_MS_PER_OUTPUT + d.inputLength * NOMINAL_MS_PER_PROMPT;
  }

  /** Compacts when the context would pass the limit with this turn's growth. */
  #grow(ctx: Context, app: number, growth: number): Context {
    if (ctx.tokens + growth <= this.#o.contextLimit) {
      this.#append(ctx, growth);
      return ctx;
    }
    return this.#startContext(app, SUMMARY_TOKENS);
  }

  /**
   * A session (top-level, or a subagent of the session `parent`) of `turns` turns, spawning subagents when
   * `subagents`; returns the draft index of its last turn.
   */
  session(
    app: number,
    startMs: number,
    turns: number,
    first: Draft['after'],
    subagents: boolean,
    parent?: SessionHint,
  ): number {
    const rng = this.#rng;
    const id = `session-${++this.#sessions}`;
    const session: SessionHint = parent === undefined ? { id } : { id, parentId: parent.id };
    let ctx = this.#startContext(app, logNormal(rng, 2000, 0.7, 200, 16_000));
    let t = startMs;
    let last = this.#turn(ctx, t, first, session);
    const spawnAt = new Set<number>();
    if (subagents) {
      const spawns = 1 + Math.floor(rng() * 3);
      for (let k = 0; k < spawns; k++) spawnAt.add(Math.floor(rng() * Math.max(1, turns - 1)));
    }
    for (let i = 1; i < turns; i++) {
      const prev = this.drafts[last]!;
      t += this.#serviceMs(prev);
      if (spawnAt.has(i - 1)) {
        const children: number[] = [];
        let childEnd = t;
        const n = 1 + Math.floor(rng() * 4);
        for (let c = 0; c < n; c++) {
          const pause = toolPauseMs(rng);
          const childTurns = logNormal(rng, MEDIAN_SUBAGENT_TURNS, 0.6, 2, 40);
          const end = this.session(app, t + pause, childTurns, { drafts: [last], pauseMs: pause }, false, session);
          children.push(end);
          childEnd = Math.max(childEnd, this.drafts[end]!.nominalMs + this.#serviceMs(this.drafts[end]!));
        }
        const pause = toolPauseMs(rng);
        t = childEnd + pause;
        ctx = this.#grow(ctx, app, prev.outputLength + n * logNormal(rng, 1500, 0.6, 200, 8000));
        last = this.#turn(ctx, t, { drafts: children, pauseMs: pause }, session);
        continue;
      }
      const pause = toolPauseMs(rng);
      t += pause;
      ctx = this.#grow(ctx, app, prev.outputLength + logNormal(rng, MEDIAN_TOOL_RESULT, 1.0, 20, 30_000));
      last = this.#turn(ctx, t, { drafts: [last], pauseMs: pause }, session);
    }
    return last;
  }
}

function check(name: string, v: number, integer: boolean): void {
  if (!(v > 0) || !Number.isFinite(v) || (integer && !Number.isSafeInteger(v)))
    throw new KvgateError(
      'KVG_ERR_INVALID_ARGUMENT',
      `agentic ${name} must be a positive ${integer ? 'integer' : 'number'}, got ${v}`,
    );
}

/**
 * Generates the agentic workload (requests ordered by nominal time; closed-loop
 * turns carry `after`).
 * @throws KvgateError KVG_ERR_INVALID_ARGUMENT for a non-positive option, or a context limit below an app prefix.
 */
export function agenticWorkload(o: AgenticOptions): Workload {
  check('sessions', o.sessions, true);
  check('session rate', o.sessionRatePerS, false);
  check('apps', o.apps, true);
  check('trace block size', o.traceBlockSize, true);
  check('median turns', o.medianTurns, false);
  if (!(o.contextLimit >= 32_000) || !Number.isSafeInteger(o.contextLimit))
    throw new KvgateError(
      'KVG_ERR_INVALID_ARGUMENT',
      `agentic context limit must be an integer >= 32000 tokens, got ${o.contextLimit}`,
    );
  const g = new Generator(o);
  const rng = seededRng(o.seed ^ 0x1b873593);
  let start = 0;
  for (let s = 0; s < o.sessions; s++) {
    if (s > 0) start += (-Math.log(Math.max(rng(), 1e-12)) / o.sessionRatePerS) * 1000;
    const turns = logNormal(rng, o.medianTurns, 0.5, 3, 200);
    g.session(s % o.apps, start, turns, undefined, rng() < SUBAGENT_SESSION_SHARE);
  }
  const order = g.drafts.map((_, i) => i).sort((a, b) => g.drafts[a]!.nominalMs - g.drafts[b]!.nominalMs || a - b);
  const indexOf = new Array<number>(order.length);
  order.forEach((d, i) => (indexOf[d] = i));
  const requests: ReplayRequest[] = order.map((d, index) => {
    const x = g.drafts[d]!;
    const base = {
      index,
      line: index + 1,
      arrivalMs: x.nominalMs,
      inputLength: x.inputLength,
      outputLength: x.outputLength,
      hashIds: x.hashIds,
      session: x.session,
    };
    if (x.after === undefined) return base;
    return { ...base, after: { requests: x.after.drafts.map((p) => indexOf[p]!), pauseMs: x.after.pauseMs } };
  });
  return {
    requests,
    traceBlockSize: o.traceBlockSize,
    arrival: 'as-recorded',
    speedup: 1,
    spanMs: requests.length > 0 ? requests[requests.length - 1]!.arrivalMs : 0,
    droppedByMaxRequests: 0,
    capping: { maxIsl: null, requestsCapped: 0, tokensRemoved: 0 },
  };
}
