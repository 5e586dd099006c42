/**
 * Mocker configuration: the option types, every default in one place
 * (`MOCKER_DEFAULTS`), and one validation pass (`resolveMockerOptions`) whose
 * errors name the field, the value and the reason. Inner code never
 * re-validates.
 */
import { randomBytes } from 'node:crypto';
import {
  ENGINE_DIALECTS,
  INLINE_SYSTEM_OPTIONS,
  WORKER_ROLES,
  type EngineDialect,
  type InlineSystemOption,
  type WorkerRole,
} from '../common/index.js';
import { KvgateError } from '../errors/index.js';
import type { TokenizerSpec } from '../tokenizer/index.js';
import {
  EVICTION_POLICIES,
  SCHEDULING_POLICIES,
  type EngineCoreOptions,
  type EvictionPolicy,
  type SchedulingPolicy,
} from './engine-types.js';
import { parseKvGroups } from './hybrid-groups.js';
import type { KvEventsEncoding } from './kv-events.js';
import { loadPerfProfile, PolynomialTimingModel, type TimingModel } from './timing.js';

/** Faults a reliability test can switch on at start or at run time (admin endpoint). */
export interface FaultSettings {
  /** Stop stepping and stop answering (except /admin); in-flight streams stall. */
  hang: boolean;
  /** Multiply every step's duration (1 = normal). */
  slowFactor: number;
  /** Fraction of completion requests answered with an HTTP error (seeded, deterministic). */
  errorRate: number;
  /** The status of those answers: 500 (an internal error), 502 or 503 (vLLM shutting down, an overloaded proxy). */
  errorStatus: 500 | 502 | 503;
  /** Fraction of KV-event batches not sent (their seq is used up, so subscribers see a gap; replay still has them). */
  dropEventRate: number;
  /** Drop exactly the next N KV-event batches (counts down). */
  dropNextEventBatches: number;
  /** Send KV-event batches in swapped pairs (n+1 before n). */
  reorderEvents: boolean;
  /**
   * Requests admitted while set write this many tokens (a chat stream's role chunk first), then
   * nothing more: no end, no [DONE], the connection left open (a stalled engine). The engine itself
   * still runs them. null: off.
   */
  stallAfterTokens: number | null;
  /**
   * Streams admitted while set write this many tokens, then an error event as vLLM's OpenAI server sends one
   * when generation fails mid-stream (`data: {"error": {...}}` with `code` `errorStatus`, then `[DONE]`), and
   * end. Chat and completion streams only. null: off.
   */
  errorAfterTokens: number | null;
  /**
   * Send this many garbage KV-event messages at once on every rank (random
   * sequence numbers from the seeded RNG, each an AllBlocksCleared batch that
   * would wipe the worker's index if a router applied it); consumed when sent.
   */
  garbageEventFlood: number;
}

export interface MockerOptions {
  /** Interface to bind HTTP, ZMQ and bootstrap sockets to. */
  host: string;
  /** HTTP port; 0 = OS-chosen. */
  port: number;
  /** Served model name (what /v1/models lists and requests must name). */
  model: string;
  /** Extra served names that are LoRA adapters: they namespace block hashes and appear as lora_name in KV events. */
  loraNames: readonly string[];
  /** Which engine to imitate: KV-event flavour, P/D protocol, extra metric names. */
  engine: EngineDialect;
  /** Which side of a P/D deployment this engine serves (`aggregated`: both). */
  mode: WorkerRole;
  numGpuBlocks: number;
  /**
   * A hybrid engine's KV-cache groups (`full,sliding:128`, `full,mamba`): group 0 is full attention, each
   * later group is indexed, evicted and published on its own. Undefined: one full-attention group.
   */
  kvGroups: string | undefined;
  blockSize: number;
  maxNumBatchedTokens: number;
  maxNumSeqs: number;
  /** vLLM's `--scheduling-policy`: `fcfs`, or `priority` (requests' `priority` field, lowest first; see EngineCoreOptions). */
  schedulingPolicy: SchedulingPolicy;
  /**
   * Which cached block a full cache evicts: `lru` (vLLM's), or `priority` (SGLang's `--radix-eviction-policy
   * priority`: the least important by the requests' `priority`, lowest kept longest; see EngineCoreOptions).
   */
  evictionPolicy: EvictionPolicy;
  /**
   * vLLM's `anthropic_inline_system` (`auto` by default, settled by probing the chat template as vLLM does:
   * common's inline-system-probe.ts): whether a Messages request's system messages inside `messages` stay system
   * turns or fold into user messages (common's inline-system.ts).
   */
  anthropicInlineSystem: InlineSystemOption;
  /** Prompt + max_tokens above this is a 400, as in vLLM. */
  maxModelLen: number;
  /** Step times are divided by this. */
  speedup: number;
  /** A perf-profile JSON path or bundled name (h100-llama3.1-8b, h200-llama3.1-8b, h100, h200); undefined = polynomial model. */
  perfProfile: string | undefined;
  /** Data-parallel ranks behind this worker, each with its own engine and event ports. */
  dpSize: number;
  /** Publish KV events over ZMQ. */
  kvEvents: boolean;
  /** PUB port of rank 0 (rank r uses port + r); 0 = OS-chosen for every rank. */
  kvEventsPort: number;
  /** ROUTER replay port of rank 0 (rank r: + r); 0 = OS-chosen; undefined = no replay socket. */
  kvEventsReplayPort: number | undefined;
  kvEventsEncoding: KvEventsEncoding;
  /** Frame 0 of every KV-event message. */
  kvEventsTopic: string;
  /** Batches kept for replay. */
  kvEventsBufferSteps: number;
  /** PUB send high-water mark (messages). */
  kvEventsHwm: number;
  /** SGLang prefill bootstrap port; 0 = OS-chosen. */
  bootstrapPort: number;
  /** How long one side of an SGLang P/D pair waits for the other. */
  bootstrapTimeoutMs: number;
  /** KV bytes per token for transfer delays; undefined = the profile's value, else 131072 (Llama-3.1-8B). */
  kvBytesPerToken: number | undefined;
  /** KV transfer bandwidth, GB/s (1e9 bytes/s). */
  kvTransferBandwidthGBps: number;
  /** vLLM P/D: how long a prefill engine holds blocks for the decode engine to pull. */
  kvLeaseMs: number;
  /** Seed for generated tokens (with the prompt) and for fault randomness. */
  seed: number;
  /** Seed of the opaque engine block hashes (uint64); undefined = random per start, like vLLM's NONE_HASH. */
  engineHashSeed: bigint | undefined;
  tokenizer: TokenizerSpec;
  /** max_tokens when a request does not say. */
  defaultMaxTokens: number;
  faults: FaultSettings;
}

export type MockerInput = Partial<Omit<MockerOptions, 'faults'>> & { faults?: Partial<FaultSettings> };

const DEFAULT_FAULTS: Readonly<FaultSettings> = Object.freeze({
  hang: false,
  slowFactor: 1,
  errorRate: 0,
  errorStatus: 500,
  dropEventRate: 0,
  dropNextEventBatches: 0,
  reorderEvents: false,
  stallAfterTokens: null,
  errorAfterTokens: null,
  garbageEventFlood: 0,
});

/** Defaults for in-process engines: every port OS-chosen. */
export const MOCKER_DEFAULTS: Readonly<MockerOptions> = Object.freeze({
  host: '127.0.0.1',
  port: 0,
  model: 'mock-model',
  loraNames: [],
  engine: 'vllm',
  mode: 'aggregated',
  numGpuBlocks: 16384,
  kvGroups: undefined,
  blockSize: 16,
  maxNumBatchedTokens: 8192,
  maxNumSeqs: 256,
  schedulingPolicy: 'fcfs',
  evictionPolicy: 'lru',
  anthropicInlineSystem: 'auto',
  maxModelLen: 32768,
  speedup: 1,
  perfProfile: undefined,
  dpSize: 1,
  kvEvents: true,
  kvEventsPort: 0,
  kvEventsReplayPort: undefined,
  kvEventsEncoding: 'map',
  kvEventsTopic: '',
  kvEventsBufferSteps: 10000,
  kvEventsHwm: 100000,
  bootstrapPort: 0,
  bootstrapTimeoutMs: 30000,
  kvBytesPerToken: undefined,
  kvTransferBandwidthGBps: 64,
  kvLeaseMs: 30000,
  seed: 0,
  engineHashSeed: undefined,
  tokenizer: undefined,
  defaultMaxTokens: 16,
  faults: DEFAULT_FAULTS,
});

/** `kvgate mocker` binds the engines' usual ports instead (0 still means OS-chosen). */
export const CLI_PORT_DEFAULTS = Object.freeze({ port: 8000, kvEventsPort: 5557, bootstrapPort: 8998 });

/** Llama-3.1-8B: 32 layers x K,V x 8 KV heads x 128 x 2 bytes. */
const DEFAULT_KV_BYTES_PER_TOKEN = 131072;

export interface FilledMockerOptions extends Readonly<
  Omit<MockerOptions, 'engineHashSeed' | 'kvBytesPerToken' | 'faults'>
> {
  readonly engineHashSeed: bigint;
  readonly kvBytesPerToken: number;
  readonly faults: Readonly<FaultSettings>;
  readonly timing: TimingModel;
}

function bad(field: string, value: unknown, reason: string): never {
  throw new KvgateError('KVG_ERR_INVALID_CONFIG', `mocker option ${field}=${String(value)}: ${reason}`, {
    field,
    value: String(value),
  });
}

function positiveInt(field: string, v: number): void {
  if (!Number.isInteger(v) || v <= 0) bad(field, v, 'must be a positive integer');
}

function port(field: string, v: number): void {
  if (!Number.isInteger(v) || v < 0 || v > 65535) bad(field, v, 'must be a port number (0 = OS-chosen)');
}

function fraction(field: string, v: number): void {
  if (typeof v !== 'number' || !(v >= 0 && v <= 1)) bad(field, v, 'must be in [0, 1]');
}

/** Validates fault settings merged over `base`. @throws KvgateError KVG_ERR_INVALID_CONFIG */
export function resolveFaults(
  input: Partial<FaultSettings>,
  base: Readonly<FaultSettings> = DEFAULT_FAULTS,
): FaultSettings {
  const f: FaultSettings = { ...base };
  for (const [k, v] of Object.entries(input)) {
    if (v === undefined) continue;
    if (!(k in DEFAULT_FAULTS)) bad(`faults.${k}`, v, 'unknown fault');
    (f as unknown as Record<string, unknown>)[k] = v;
  }
  if (typeof f.hang !== 'boolean') bad('faults.hang', f.hang, 'must be a boolean');
  if (typeof f.reorderEvents !== 'boolean') bad('faults.reorderEvents', f.reorderEvents, 'must be a boolean');
  if (typeof f.slowFactor !== 'number' || !(f.slowFactor > 0) || !Number.isFinite(f.slowFactor))
    bad('faults.slowFactor', f.slowFactor, 'must be a finite number > 0');
  fraction('faults.errorRate', f.errorRate);
  if (![500, 502, 503].includes(f.errorStatus)) bad('faults.errorStatus', f.errorStatus, 'must be 500, 502 or 503');
  fraction('faults.dropEventRate', f.dropEventRate);
  if (!Number.isInteger(f.dropNextEventBatches) || f.dropNextEventBatches < 0)
    bad('faults.dropNextEventBatches', f.dropNextEventBatches, 'must be an integer >= 0');
  if (f.stallAfterTokens !== null && (!Number.isInteger(f.stallAfterTokens) || f.stallAfterTokens < 0)) {
    bad('faults.stallAfterTokens', f.stallAfterTokens, 'must be an integer >= 0, or null (off)');
  }
  if (f.errorAfterTokens !== null && (!Number.isInteger(f.errorAfterTokens) || f.errorAfterTokens < 0)) {
    bad('faults.errorAfterTokens', f.errorAfterTokens, 'must be an integer >= 0, or null (off)');
  }
  if (!Number.isInteger(f.garbageEventFlood) || f.garbageEventFlood < 0 || f.garbageEventFlood > 10_000_000) {
    bad('faults.garbageEventFlood', f.garbageEventFlood, 'must be an integer in [0, 10000000]');
  }
  return f;
}

/**
 * Merges `input` over MOCKER_DEFAULTS, validates everything, loads the timing
 * model, and freezes the result.
 * @throws KvgateError KVG_ERR_INVALID_CONFIG naming the field, value and reason.
 */
export function resolveMockerOptions(input: MockerInput = {}): FilledMockerOptions {
  const defined = Object.fromEntries(Object.entries(input).filter(([, v]) => v !== undefined)) as MockerInput;
  const o = { ...MOCKER_DEFAULTS, ...defined, faults: resolveFaults(input.faults ?? {}) };
  for (const f of [
    'numGpuBlocks',
    'blockSize',
    'maxNumBatchedTokens',
    'maxNumSeqs',
    'maxModelLen',
    'dpSize',
    'kvEventsBufferSteps',
    'kvEventsHwm',
    'bootstrapTimeoutMs',
    'kvLeaseMs',
    'defaultMaxTokens',
  ] as const) {
    positiveInt(f, o[f]);
  }
  port('port', o.port);
  port('kvEventsPort', o.kvEventsPort);
  if (o.kvEventsReplayPort !== undefined) port('kvEventsReplayPort', o.kvEventsReplayPort);
  port('bootstrapPort', o.bootstrapPort);
  if (o.kvEventsPort > 0 && o.kvEventsPort + o.dpSize - 1 > 65535)
    bad('kvEventsPort', o.kvEventsPort, `rank ports run past 65535 with dpSize ${o.dpSize}`);
  if (!(o.speedup > 0) || !Number.isFinite(o.speedup)) bad('speedup', o.speedup, 'must be a finite number > 0');
  if (!(o.kvTransferBandwidthGBps > 0)) bad('kvTransferBandwidthGBps', o.kvTransferBandwidthGBps, 'must be > 0');
  if (o.kvBytesPerToken !== undefined) positiveInt('kvBytesPerToken', o.kvBytesPerToken);
  if (!ENGINE_DIALECTS.includes(o.engine)) bad('engine', o.engine, 'must be vllm or sglang');
  if (!WORKER_ROLES.includes(o.mode)) bad('mode', o.mode, 'must be aggregated, prefill or decode');
  if (!SCHEDULING_POLICIES.includes(o.schedulingPolicy))
    bad('schedulingPolicy', o.schedulingPolicy, 'must be fcfs or priority');
  if (!EVICTION_POLICIES.includes(o.evictionPolicy)) bad('evictionPolicy', o.evictionPolicy, 'must be lru or priority');
  if (!INLINE_SYSTEM_OPTIONS.includes(o.anthropicInlineSystem))
    bad('anthropicInlineSystem', o.anthropicInlineSystem, 'must be auto, preserve or fold');
  if (!['array', 'map'].includes(o.kvEventsEncoding))
    bad('kvEventsEncoding', o.kvEventsEncoding, 'must be array or map');
  if (typeof o.model !== 'string' || o.model === '') bad('model', o.model, 'must be a non-empty string');
  if (!Array.isArray(o.loraNames) || o.loraNames.some((n) => typeof n !== 'string' || n === '' || n === o.model)) {
    bad('loraNames', o.loraNames, 'must be distinct non-empty names other than the model');
  }
  if (!Number.isInteger(o.seed)) bad('seed', o.seed, 'must be an integer');
  if (o.engineHashSeed !== undefined && typeof o.engineHashSeed !== 'bigint')
    bad('engineHashSeed', o.engineHashSeed, 'must be a bigint');
  if (o.kvGroups !== undefined) parseKvGroups(o.kvGroups);
  const timing = o.perfProfile === undefined ? new PolynomialTimingModel() : loadPerfProfile(o.perfProfile);
  return Object.freeze({
    ...o,
    loraNames: Object.freeze([...o.loraNames]),
    faults: Object.freeze(o.faults),
    engineHashSeed: BigInt.asUintN(64, o.engineHashSeed ?? randomBytes(8).readBigUInt64LE(0)),
    kvBytesPerToken: o.kvBytesPerToken ?? timing.kvBytesPerToken ?? DEFAULT_KV_BYTES_PER_TOKEN,
    timing,
  });
}

/** The EngineCore options of one data-parallel rank (each rank hashes under its own seed, like separate vLLM processes). */
export function engineCoreOptions(o: FilledMockerOptions, sampleTokenIds: Uint32Array, rank = 0): EngineCoreOptions {
  return {
    numGpuBlocks: o.numGpuBlocks,
    kvGroups: o.kvGroups === undefined ? undefined : parseKvGroups(o.kvGroups),
    blockSize: o.blockSize,
    maxNumBatchedTokens: o.maxNumBatchedTokens,
    maxNumSeqs: o.maxNumSeqs,
    schedulingPolicy: o.schedulingPolicy,
    evictionPolicy: o.evictionPolicy,
    speedup: o.speedup,
    timing: o.timing,
    engineHashSeed: BigInt.asUintN(64, o.engineHashSeed + BigInt(rank)),
    sampleTokenIds,
    kvBytesPerToken: o.kvBytesPerToken,
    kvTransferBandwidth: o.kvTransferBandwidthGBps * 1e9,
  };
}
