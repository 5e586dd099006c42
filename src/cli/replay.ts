/**
 * `kvgate replay`: replays a Mooncake-format trace against simulated engines
 * and compares routing policies. Prints a Markdown table (or `--json`),
 * optionally writes results and SVG charts to `--out DIR`, and reports
 * progress on stderr (a bar on a terminal, else a line every few seconds).
 *
 * Engine flags are the mocker's (`kvgate mocker --help`), except that the
 * engines' own `--speedup` is `--engine-speedup` here (`--speedup` scales the
 * trace's arrival times) and ports are always OS-chosen.
 */
import { cpus } from 'node:os';
import { parseCommandArgs } from '../config/index.js';
import { KvgateError } from '../errors/index.js';
import { OPTIONS as MOCKER_OPTIONS, parseMockerArgs } from './mocker.js';
import type { MockerInput } from '../mocker/index.js';
import {
  AGENTIC_DEFAULTS,
  ARRIVAL_MODES,
  DEFAULT_SYNC_DELAY_MS,
  DEFAULT_TRACE_BLOCK_SIZE,
  DISAGG_PROTOCOLS,
  FRONT_DOOR_MODES,
  parsePolicies,
  PRESET_POLICY_NAMES,
  ProgressBar,
  renderMarkdown,
  runReplay,
  writeReport,
  type ArrivalMode,
  type DisaggProtocol,
  type FrontDoorMode,
  type PolicySpec,
  type ReplayConfig,
  type ReplicaSweep,
  type ReplayHooks,
  type ReplayMode,
  type ReplayTopology,
} from '../replay/index.js';

/** Mocker flags that replay sets itself (or names differently). */
export const NOT_FORWARDED = new Set([
  'count',
  'host',
  'port',
  'mode',
  'speedup',
  'help',
  'kv-events-port',
  'kv-events-replay-port',
  'bootstrap-port',
  'seed',
]);

const REPLAY_OPTIONS = {
  trace: { type: 'string' },
  workload: { type: 'string' },
  sessions: { type: 'string' },
  'session-rate': { type: 'string' },
  apps: { type: 'string' },
  'context-limit': { type: 'string' },
  'median-turns': { type: 'string' },
  mode: { type: 'string' },
  compare: { type: 'string' },
  'router-config': { type: 'string', multiple: true },
  workers: { type: 'string' },
  'prefill-workers': { type: 'string' },
  'decode-workers': { type: 'string' },
  'disagg-protocol': { type: 'string' },
  'trace-block-size': { type: 'string' },
  arrival: { type: 'string' },
  speedup: { type: 'string' },
  'max-requests': { type: 'string' },
  'max-isl': { type: 'string' },
  'skip-requests': { type: 'string' },
  strict: { type: 'boolean' },
  seed: { type: 'string' },
  jobs: { type: 'string' },
  json: { type: 'boolean' },
  out: { type: 'string' },
  progress: { type: 'boolean' },
  'no-progress': { type: 'boolean' },
  'engine-speedup': { type: 'string' },
  replicas: { type: 'string' },
  'replica-sync': { type: 'string' },
  'replica-sync-delay-ms': { type: 'string' },
  'replica-front': { type: 'string' },
  'session-priority': { type: 'boolean' },
  'session-pins': { type: 'boolean' },
  help: { type: 'boolean', short: 'h' },
} as const;

export const REPLAY_HELP = `usage: kvgate replay --trace FILE | --workload agentic [options]

Replays a Mooncake-format JSONL trace ({timestamp, input_length, output_length,
hash_ids}) and compares routing policies on TTFT, ITL, throughput, prefix hit
rate (against the trace's infinite-cache bound), load balance and the router's
prediction error.

  --trace FILE                 the trace (or --workload agentic)
  --workload agentic           generate closed-loop agent sessions from --seed instead of reading a trace:
    --sessions N               top-level sessions (${AGENTIC_DEFAULTS.sessions}); subagents come on top
    --session-rate R           session starts per second (${AGENTIC_DEFAULTS.sessionRatePerS})
    --apps N                   apps, each with its own shared prompt prefix (${AGENTIC_DEFAULTS.apps})
    --context-limit N          tokens past which a session is compacted (${AGENTIC_DEFAULTS.contextLimit})
    --median-turns N           median turns of a top-level session (${AGENTIC_DEFAULTS.medianTurns})
  --mode offline|online        offline: virtual time, simulated engines, deterministic (default);
                               online: mocker engines behind the kvgate gateway over HTTP
  --compare LIST               policies: kv, kv-one-group, kv-step, ${PRESET_POLICY_NAMES.join(', ')}, round-robin,
                               random, power-of-two, least-loaded (default kv); in a P/D run (offline), any of them
                               followed by +dynamo-order (e.g. kv+dynamo-order) routes each decode in Dynamo's order,
                               after its prefill, instead of the gateway's (the decode slot booked first)
  --router-config JSON         add a kv variant, e.g. '{"router_temperature":0.5}' -> kv[router_temperature=0.5] (repeatable)
  --workers N                  aggregated engines (8)
  --prefill-workers P          with --decode-workers D: a disaggregated topology
  --decode-workers D
  --disagg-protocol LIST       bootstrap (SGLang), kv_transfer_params (vLLM) (default both)
  --trace-block-size N         tokens per hash id (${DEFAULT_TRACE_BLOCK_SIZE})
  --arrival MODE               as-recorded, or spread (evenly within runs of equal timestamps) (as-recorded)
  --speedup X                  divide arrival times by X (1)
  --skip-requests N            leave out the first N valid requests (replay a later slice)
  --max-requests N             replay only the first N valid requests (after --skip-requests)
  --max-isl N                  cut longer prompts to N tokens (reported)
  --strict                     reject the trace if any line is invalid (default: report and skip)
  --seed N                     seeds tokens, routers and engines (0)
  --jobs N                     offline runs in parallel worker threads (min(runs, CPUs))
  --json                       print {"policies": {...}, "workload": {...}, "meta": {...}} instead of the table
  --out DIR                    write results.json, results.md and SVG charts to DIR
  --progress | --no-progress   progress on stderr: a bar on a terminal, else a line every 5 s (default on)
  --engine-speedup X           divide engine step times by X (the mocker's --speedup)
  --replicas LIST              router replicas behind one front door, offline (1); a list such as 1,2,4,8 runs each
  --replica-sync on|off        replicas share their bookings (on); on,off runs both
  --replica-sync-delay-ms D    virtual ms before a booking change reaches the other replicas (${DEFAULT_SYNC_DELAY_MS})
  --replica-front rr|random    how the front door spreads requests over replicas (rr; random is seeded)
  --session-priority           the router sends each request's root session start as its priority (the gateway's
                               session_priority; load-only policies then pin the named sessions, as the gateway
                               does); needs --scheduling-policy priority or --eviction-policy priority
  --session-pins               the agentic workload's clients name their sessions (x-session-id, x-parent-session-id)
                               and the gateway pins them (session_affinity: pin), in each pool of a P/D fleet
  -h, --help                   this text
  (kvgate replay --scenario conditional-disagg --help: the disagg_policy comparison on a P/D fleet)

Engine model: every \`kvgate mocker\` flag except --count, --host, ports, --mode and
--speedup, e.g. --num-gpu-blocks, --block-size, --max-num-batched-tokens,
--max-num-seqs, --max-model-len (default: the KV cache's capacity), --perf-profile h100,
--kv-bytes-per-token, --kv-transfer-bandwidth, --kv-lease-ms, --engine sglang.
`;

export function usageError(message: string): KvgateError {
  return new KvgateError('KVG_ERR_INVALID_ARGUMENT', message);
}

export function integer(flag: string, v: string | undefined, min: number): number | undefined {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (v.trim() === '' || !Number.isSafeInteger(n) || n < min)
    throw usageError(`--${flag} ${v}: expected an integer >= ${min}`);
  return n;
}

export function positiveNumber(flag: string, v: string | undefined): number | undefined {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (v.trim() === '' || !(n > 0) || !Number.isFinite(n)) throw usageError(`--${flag} ${v}: expected a number > 0`);
  return n;
}

/** A comma list of the flag's values, each parsed by `one` (which names the flag in its errors). */
function list<T>(flag: string, v: string, one: (x: string) => T): T[] {
  const items = v
    .split(',')
    .map((x) => x.trim())
    .filter((x) => x !== '');
  if (items.length === 0) throw usageError(`--${flag} ${v}: name at least one value`);
  const out = items.map(one);
  if (new Set(items).size !== items.length) throw usageError(`--${flag} ${v}: a value is listed twice`);
  return out;
}

/** --replicas, --replica-sync, --replica-sync-delay-ms, --replica-front. */
function replicaSweep(s: (k: string) => string | undefined, mode: ReplayMode): ReplicaSweep {
  const counts = list('replicas', s('replicas') ?? '1', (x) => integer('replicas', x, 1)!);
  const sync = list('replica-sync', s('replica-sync') ?? 'on', (x) => {
    if (x !== 'on' && x !== 'off') throw usageError(`--replica-sync ${x}: expected on or off`);
    return x === 'on';
  });
  const delay = s('replica-sync-delay-ms');
  const syncDelayMs = delay === undefined ? DEFAULT_SYNC_DELAY_MS : Number(delay);
  if (delay !== undefined && (delay.trim() === '' || !Number.isFinite(syncDelayMs) || syncDelayMs < 0)) {
    throw usageError(`--replica-sync-delay-ms ${delay}: expected a number of ms >= 0`);
  }
  const front = (s('replica-front') ?? 'rr') as FrontDoorMode;
  if (!FRONT_DOOR_MODES.includes(front))
    throw usageError(`--replica-front ${front}: expected ${FRONT_DOOR_MODES.join(' or ')}`);
  if (mode === 'online' && counts.some((n) => n !== 1))
    throw usageError('--replicas: router replicas are modelled offline only (--mode offline)');
  return { counts, sync, syncDelayMs, front };
}

/** Offline runs a config makes: per policy, P/D protocol, replica count (and sync setting, for kv policies with replicas). */
function runCount(policies: readonly PolicySpec[], topology: ReplayTopology, r: ReplicaSweep): number {
  const protocols = topology.kind === 'aggregated' ? 1 : topology.protocols.length;
  return (
    policies.reduce(
      (n, p) => n + r.counts.reduce((m, c) => m + (c === 1 || p.kind !== 'kv' ? 1 : r.sync.length), 0),
      0,
    ) * protocols
  );
}

export interface ReplayCliPlan {
  help: boolean;
  json: boolean;
  out: string | undefined;
  /** false = --no-progress; true = --progress; undefined = the default (on). */
  progress: boolean | undefined;
  config: ReplayConfig;
}

/** `--workers`, or `--prefill-workers` with `--decode-workers` and the P/D protocols to compare. */
function topologyFlags(s: (k: string) => string | undefined): ReplayTopology {
  const prefill = integer('prefill-workers', s('prefill-workers'), 1);
  const decode = integer('decode-workers', s('decode-workers'), 1);
  if (prefill !== undefined || decode !== undefined) {
    if (prefill === undefined || decode === undefined)
      throw usageError('--prefill-workers and --decode-workers go together');
    if (s('workers') !== undefined)
      throw usageError('--workers is for aggregated topologies; use --prefill-workers and --decode-workers for P/D');
    const protocols = (s('disagg-protocol') ?? DISAGG_PROTOCOLS.join(','))
      .split(',')
      .map((p) => p.trim())
      .filter((p) => p !== '');
    for (const p of protocols) {
      if (!(DISAGG_PROTOCOLS as readonly string[]).includes(p))
        throw usageError(`--disagg-protocol ${p}: expected ${DISAGG_PROTOCOLS.join(', ')}`);
    }
    if (protocols.length === 0) throw usageError('--disagg-protocol: name at least one protocol');
    return {
      kind: 'disaggregated',
      prefillWorkers: prefill,
      decodeWorkers: decode,
      protocols: protocols as DisaggProtocol[],
    };
  }
  if (s('disagg-protocol') !== undefined)
    throw usageError('--disagg-protocol needs --prefill-workers and --decode-workers');
  return { kind: 'aggregated', workers: integer('workers', s('workers'), 1) ?? 8 };
}

/**
 * The engine model: the mocker's own flag parser over the forwarded flags, with the addresses
 * a replay chooses itself left open.
 */
export function engineFlags(
  values: Record<string, string | string[] | boolean | undefined>,
  forwarded: Record<string, unknown>,
): MockerInput {
  const mockerArgv: string[] = [];
  for (const [k, v] of Object.entries(values)) {
    if (!(k in forwarded) || v === undefined) continue;
    if (Array.isArray(v)) for (const x of v) mockerArgv.push(`--${k}`, x);
    else if (v === true) mockerArgv.push(`--${k}`);
    else if (v !== false) mockerArgv.push(`--${k}`, v);
  }
  const engineSpeedup = positiveNumber('engine-speedup', values['engine-speedup'] as string | undefined);
  if (engineSpeedup !== undefined) mockerArgv.push('--speedup', String(engineSpeedup));
  const parsed = parseMockerArgs(mockerArgv).engines[0]!;
  return {
    ...parsed,
    host: undefined,
    port: 0,
    kvEventsPort: 0,
    kvEventsReplayPort: undefined,
    bootstrapPort: 0,
    mode: undefined,
  };
}

/** `--session-priority`: only with engines that schedule or evict by priority (others refuse a priority). */
function sessionPriorityFlag(on: boolean, engine: MockerInput): { sessionPriority?: true } {
  if (!on) return {};
  if (engine.schedulingPolicy !== 'priority' && engine.evictionPolicy !== 'priority') {
    throw usageError(
      '--session-priority needs engines that schedule or evict by it: add --scheduling-policy priority or --eviction-policy priority',
    );
  }
  return { sessionPriority: true };
}

/** `--session-pins`: the generated agents' sessions pinned as `session_affinity: pin` does. */
function sessionPinsFlag(on: boolean, agentic: boolean): { sessionPins?: true } {
  if (!on) return {};
  if (!agentic) throw usageError('--session-pins: only the agentic workload has sessions (--workload agentic)');
  return { sessionPins: true };
}

/**
 * Turns argv into a replay config (values are validated further when the replay starts).
 * @throws KvgateError KVG_ERR_INVALID_ARGUMENT for unknown flags and bad values; KVG_ERR_INVALID_CONFIG for bad router configs.
 */
export function parseReplayArgs(argv: string[]): ReplayCliPlan {
  const forwarded = Object.fromEntries(Object.entries(MOCKER_OPTIONS).filter(([k]) => !NOT_FORWARDED.has(k)));
  let values: Record<string, string | string[] | boolean | undefined>;
  try {
    values = parseCommandArgs(argv, { ...forwarded, ...REPLAY_OPTIONS });
  } catch (err) {
    throw usageError((err as Error).message);
  }
  const s = (k: string): string | undefined => values[k] as string | undefined;
  if (values.help === true) {
    return {
      help: true,
      json: false,
      out: undefined,
      progress: undefined,
      config: undefined as unknown as ReplayConfig,
    };
  }
  const agentic = agenticFlags(s);
  const trace = agentic !== undefined ? 'agentic' : s('trace');
  if (trace === undefined) throw usageError('--trace FILE is required (or --workload agentic)');
  const mode = (s('mode') ?? 'offline') as ReplayMode;
  if (mode !== 'offline' && mode !== 'online') throw usageError(`--mode ${mode}: expected offline or online`);
  const arrival = (s('arrival') ?? 'as-recorded') as ArrivalMode;
  if (!ARRIVAL_MODES.includes(arrival))
    throw usageError(`--arrival ${arrival}: expected ${ARRIVAL_MODES.join(' or ')}`);
  const compare = (s('compare') ?? (values['router-config'] === undefined ? 'kv' : '')).split(',');
  const policies = parsePolicies(compare, (values['router-config'] as string[] | undefined) ?? []);

  const topology = topologyFlags(s);
  const engine = engineFlags(values, forwarded);

  const seed = integer('seed', s('seed'), 0) ?? 0;
  const replicas = replicaSweep(s, mode);
  const runs = runCount(policies, topology, replicas);
  const jobs = integer('jobs', s('jobs'), 1) ?? Math.max(1, Math.min(runs, cpus().length));
  const maxRequests = integer('max-requests', s('max-requests'), 1);
  const maxIsl = integer('max-isl', s('max-isl'), 1);
  const skipRequests = integer('skip-requests', s('skip-requests'), 0);
  const config: ReplayConfig = {
    trace,
    ...(agentic !== undefined ? { agentic } : {}),
    traceBlockSize: integer('trace-block-size', s('trace-block-size'), 1) ?? DEFAULT_TRACE_BLOCK_SIZE,
    strict: values.strict === true,
    workload: {
      arrival,
      speedup: positiveNumber('speedup', s('speedup')) ?? 1,
      ...(skipRequests !== undefined ? { skipRequests } : {}),
      ...(maxRequests !== undefined ? { maxRequests } : {}),
      ...(maxIsl !== undefined ? { maxIsl } : {}),
    },
    mode,
    policies,
    topology,
    engine,
    seed,
    jobs,
    replicas,
    ...sessionPriorityFlag(values['session-priority'] === true, engine),
    ...sessionPinsFlag(values['session-pins'] === true, agentic !== undefined),
  };
  const progress = values['no-progress'] === true ? false : values.progress === true ? true : undefined;
  return { help: false, json: values.json === true, out: s('out'), progress, config };
}

/** `--workload agentic` and its options (with the seed); undefined for a trace. */
function agenticFlags(s: (k: string) => string | undefined): ReplayConfig['agentic'] {
  const w = s('workload');
  const own = ['sessions', 'session-rate', 'apps', 'context-limit', 'median-turns'].filter((k) => s(k) !== undefined);
  if (w === undefined) {
    if (own.length > 0) throw usageError(`--${own[0]!} applies to --workload agentic only`);
    return undefined;
  }
  if (w !== 'agentic') throw usageError(`--workload ${w}: expected agentic`);
  if (s('trace') !== undefined) throw usageError('--trace and --workload agentic exclude each other');
  for (const k of ['max-requests', 'skip-requests', 'max-isl', 'speedup', 'arrival'])
    if (s(k) !== undefined) throw usageError(`--${k} applies to a trace, not to --workload agentic`);
  const d = AGENTIC_DEFAULTS;
  return {
    seed: integer('seed', s('seed'), 0) ?? 0,
    sessions: integer('sessions', s('sessions'), 1) ?? d.sessions,
    sessionRatePerS: positiveNumber('session-rate', s('session-rate')) ?? d.sessionRatePerS,
    apps: integer('apps', s('apps'), 1) ?? d.apps,
    contextLimit: integer('context-limit', s('context-limit'), 32_000) ?? d.contextLimit,
    medianTurns: positiveNumber('median-turns', s('median-turns')) ?? d.medianTurns,
  };
}

/** The command as typed, for provenance (arguments with spaces quoted). */
export function commandLine(argv: readonly string[]): string {
  const quote = (a: string): string => (/^[\w@%+=:,./[\]-]+$/.test(a) ? a : `'${a.replace(/'/g, `'\\''`)}'`);
  return ['kvgate', 'replay', ...argv].map(quote).join(' ');
}

export async function replayCommand(
  argv: string[],
  hooks: Partial<Pick<ReplayHooks, 'runOnline'>> = {},
): Promise<number> {
  let plan: ReplayCliPlan;
  try {
    plan = parseReplayArgs(argv);
  } catch (err) {
    process.stderr.write(`kvgate replay: ${(err as Error).message}\n\nRun \`kvgate replay --help\` for the options.\n`);
    return 2;
  }
  if (plan.help) {
    process.stdout.write(REPLAY_HELP);
    return 0;
  }
  const bar = new ProgressBar(process.stderr, { enabled: plan.progress !== false });
  let started = false;
  let runOnline = hooks.runOnline;
  if (plan.config.mode === 'online' && runOnline === undefined)
    runOnline = (await import('./replay-online.js')).runOnlineReplay;
  try {
    const result = await runReplay(plan.config, {
      command: commandLine(argv),
      onProgress: (label, done, total) => {
        if (!started) {
          bar.start(label, total);
          started = true;
        }
        bar.update(done);
      },
      ...(runOnline !== undefined ? { runOnline } : {}),
    });
    bar.end();
    const { report, runs, trace } = result;
    if (trace.issues.length > 0) {
      const shown = trace.issues
        .slice(0, 20)
        .map((i) => `  ${i.message}`)
        .join('\n');
      const more = trace.issues.length > 20 ? `\n  ... and ${trace.issues.length - 20} more` : '';
      process.stderr.write(`kvgate replay: skipped ${trace.issues.length} invalid trace line(s):\n${shown}${more}\n`);
    }
    if (plan.out !== undefined) {
      const files = writeReport(plan.out, report, runs);
      process.stderr.write(`kvgate replay: wrote ${files.length} files to ${plan.out}\n`);
    }
    process.stdout.write(plan.json ? `${JSON.stringify(report, null, 2)}\n` : renderMarkdown(report));
    return 0;
  } catch (err) {
    bar.end();
    process.stderr.write(`kvgate replay: ${err instanceof Error ? err.message : String(err)}\n`);
    return 1;
  }
}
