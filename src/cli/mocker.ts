/**
 * `kvgate mocker`: starts N simulated engines on consecutive ports and prints
 * one JSON line per engine (its URL and every port) so scripts can read them.
 * Runs until SIGINT or SIGTERM.
 */
import { parseCommandArgs } from '../config/index.js';
import { KvgateError } from '../errors/index.js';
import {
  CLI_PORT_DEFAULTS,
  MOCKER_DEFAULTS,
  startMocker,
  type MockerHandle,
  type MockerInput,
} from '../mocker/index.js';

export const MOCKER_HELP = `usage: kvgate mocker [options]

Starts simulated vLLM/SGLang engines (OpenAI HTTP API, ZMQ KV events, P/D roles).
Engine i listens on --port + i; its rank r publishes KV events on
--kv-events-port + i*dp_size + r. A port of 0 means OS-chosen. Prints one JSON
line per engine, then runs until interrupted.

  --count N                    engines to start (1)
  --host H                     bind address (${MOCKER_DEFAULTS.host})
  --port P                     HTTP port of engine 0 (${CLI_PORT_DEFAULTS.port})
  --model NAME                 served model name (${MOCKER_DEFAULTS.model})
  --lora NAME                  also serve a LoRA adapter name (repeatable)
  --engine vllm|sglang         engine to imitate (${MOCKER_DEFAULTS.engine})
  --mode aggregated|prefill|decode   disaggregation role (${MOCKER_DEFAULTS.mode})
  --num-gpu-blocks N           KV-cache blocks (${MOCKER_DEFAULTS.numGpuBlocks})
  --kv-groups LIST             a hybrid engine's KV-cache groups: full,sliding:<tokens> or full,mamba (default: full)
  --block-size N               tokens per block (${MOCKER_DEFAULTS.blockSize})
  --max-num-batched-tokens N   token budget per step (${MOCKER_DEFAULTS.maxNumBatchedTokens})
  --max-num-seqs N             running requests per step (${MOCKER_DEFAULTS.maxNumSeqs})
  --scheduling-policy fcfs|priority   as vLLM's: priority admits by request priority, lowest first (${MOCKER_DEFAULTS.schedulingPolicy})
  --eviction-policy lru|priority   which cached block a full cache evicts: lru (vLLM's), or priority (SGLang's radix
                               priority eviction: the blocks of the lowest-priority requests first) (${MOCKER_DEFAULTS.evictionPolicy})
  --anthropic-inline-system auto|preserve|fold  as vLLM's: a Messages request's system messages inside messages
                               stay system turns or fold into user messages; auto probes the chat template
                               (${MOCKER_DEFAULTS.anthropicInlineSystem})
  --max-model-len N            context length (${MOCKER_DEFAULTS.maxModelLen})
  --speedup X                  divide step times by X (${MOCKER_DEFAULTS.speedup})
  --perf-profile FILE|NAME     time steps from a measured GPU profile (h100, h200, or a JSON path)
  --dp-size N                  data-parallel ranks per engine (${MOCKER_DEFAULTS.dpSize})
  --kv-events-port P           KV-event PUB port of engine 0 rank 0 (${CLI_PORT_DEFAULTS.kvEventsPort})
  --no-kv-events               do not publish KV events
  --kv-events-replay-port P    also serve replay (ROUTER) from this port (off)
  --kv-events-encoding array|map   event encoding (${MOCKER_DEFAULTS.kvEventsEncoding})
  --kv-events-topic T          topic frame ('${MOCKER_DEFAULTS.kvEventsTopic}')
  --kv-events-buffer-steps N   batches kept for replay (${MOCKER_DEFAULTS.kvEventsBufferSteps})
  --bootstrap-port P           SGLang prefill bootstrap port of engine 0 (${CLI_PORT_DEFAULTS.bootstrapPort})
  --bootstrap-timeout-ms N     SGLang P/D pairing timeout (${MOCKER_DEFAULTS.bootstrapTimeoutMs})
  --kv-bytes-per-token N       KV bytes per token for transfer delays (profile's, else 131072)
  --kv-transfer-bandwidth GBPS KV transfer bandwidth in GB/s (${MOCKER_DEFAULTS.kvTransferBandwidthGBps})
  --kv-lease-ms N              vLLM P/D: how long a prefill engine holds blocks (${MOCKER_DEFAULTS.kvLeaseMs})
  --seed N                     seed of generated tokens and fault draws (${MOCKER_DEFAULTS.seed})
  --engine-hash-seed N         seed of the opaque engine block hashes (random)
  --tokenizer PATH|demo        tokenizer.json (or its folder); 'demo' = Qwen3; default: fallback tokenizer
  --tokenizer-config PATH      tokenizer_config.json with the chat template (default: next to tokenizer.json)
  --default-max-tokens N       max_tokens when a request gives none (${MOCKER_DEFAULTS.defaultMaxTokens})
  --fault-hang                 start hung
  --fault-slow-factor X        multiply step times by X
  --fault-error-rate R         fail this fraction of requests with HTTP 500
  --fault-error-status N       the status of those failures: 500, 502 or 503 (500)
  --fault-drop-event-rate R    drop this fraction of KV-event batches
  --fault-reorder-events       send KV-event batches in swapped pairs
  --fault-stall-after-tokens N write N tokens of each answer, then stall with the connection open
  --fault-error-after-tokens N write N tokens of each stream, then an error event (code: the error status)
  -h, --help                   this text
`;

export const OPTIONS = {
  count: { type: 'string' },
  host: { type: 'string' },
  port: { type: 'string' },
  model: { type: 'string' },
  lora: { type: 'string', multiple: true },
  engine: { type: 'string' },
  mode: { type: 'string' },
  'num-gpu-blocks': { type: 'string' },
  'kv-groups': { type: 'string' },
  'block-size': { type: 'string' },
  'max-num-batched-tokens': { type: 'string' },
  'max-num-seqs': { type: 'string' },
  'scheduling-policy': { type: 'string' },
  'eviction-policy': { type: 'string' },
  'anthropic-inline-system': { type: 'string' },
  'max-model-len': { type: 'string' },
  speedup: { type: 'string' },
  'perf-profile': { type: 'string' },
  'dp-size': { type: 'string' },
  'kv-events-port': { type: 'string' },
  'no-kv-events': { type: 'boolean' },
  'kv-events-replay-port': { type: 'string' },
  'kv-events-encoding': { type: 'string' },
  'kv-events-topic': { type: 'string' },
  'kv-events-buffer-steps': { type: 'string' },
  'bootstrap-port': { type: 'string' },
  'bootstrap-timeout-ms': { type: 'string' },
  'kv-bytes-per-token': { type: 'string' },
  'kv-transfer-bandwidth': { type: 'string' },
  'kv-lease-ms': { type: 'string' },
  seed: { type: 'string' },
  'engine-hash-seed': { type: 'string' },
  tokenizer: { type: 'string' },
  'tokenizer-config': { type: 'string' },
  'default-max-tokens': { type: 'string' },
  'fault-hang': { type: 'boolean' },
  'fault-slow-factor': { type: 'string' },
  'fault-error-rate': { type: 'string' },
  'fault-error-status': { type: 'string' },
  'fault-drop-event-rate': { type: 'string' },
  'fault-reorder-events': { type: 'boolean' },
  'fault-stall-after-tokens': { type: 'string' },
  'fault-error-after-tokens': { type: 'string' },
  help: { type: 'boolean', short: 'h' },
} as const;

export interface MockerCliPlan {
  help: boolean;
  /** One options object per engine, ports already offset. */
  engines: MockerInput[];
}

function num(flag: string, v: string | undefined): number | undefined {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (v.trim() === '' || !Number.isFinite(n))
    throw new KvgateError('KVG_ERR_INVALID_CONFIG', `--${flag} ${v}: not a number`, { field: flag, value: v });
  return n;
}

/** `--engine-hash-seed`: a bigint (engine i publishes under seed + i). */
function engineHashSeedFlag(hashSeed: string | undefined): bigint | undefined {
  if (hashSeed === undefined) return undefined;
  try {
    return BigInt(hashSeed);
  } catch {
    throw new KvgateError('KVG_ERR_INVALID_CONFIG', `--engine-hash-seed ${hashSeed}: not an integer`, {
      field: 'engine-hash-seed',
    });
  }
}

/**
 * `--tokenizer` with `--tokenizer-config`. `--tokenizer demo --tokenizer-config X` is the demo vocabulary
 * with another chat template (the tokenizer layer resolves 'demo' inside explicit files), never X silently dropped.
 */
function tokenizerFlags(
  tokenizerPath: string | undefined,
  tokenizerConfig: string | undefined,
): MockerInput['tokenizer'] {
  return tokenizerPath === undefined || tokenizerConfig === undefined
    ? tokenizerPath
    : { tokenizerJson: tokenizerPath, tokenizerConfig };
}

/** The `--fault-*` flags: what an engine gets wrong on purpose. */
function faultFlags(values: Record<string, string | string[] | boolean | undefined>): MockerInput['faults'] {
  const s = (k: string): string | undefined => values[k] as string | undefined;
  return {
    hang: values['fault-hang'] === true ? true : undefined,
    slowFactor: num('fault-slow-factor', s('fault-slow-factor')),
    errorRate: num('fault-error-rate', s('fault-error-rate')),
    errorStatus: num('fault-error-status', s('fault-error-status')) as 500 | 502 | 503 | undefined,
    dropEventRate: num('fault-drop-event-rate', s('fault-drop-event-rate')),
    reorderEvents: values['fault-reorder-events'] === true ? true : undefined,
    stallAfterTokens: num('fault-stall-after-tokens', s('fault-stall-after-tokens')),
    errorAfterTokens: num('fault-error-after-tokens', s('fault-error-after-tokens')),
  };
}

/**
 * Turns argv into per-engine options (validation of values happens in startMocker).
 * @throws KvgateError KVG_ERR_INVALID_CONFIG for unknown flags or non-numeric numbers.
 */
export function parseMockerArgs(argv: string[]): MockerCliPlan {
  let values: Record<string, string | string[] | boolean | undefined>;
  try {
    values = parseCommandArgs(argv, OPTIONS);
  } catch (err) {
    throw new KvgateError('KVG_ERR_INVALID_CONFIG', (err as Error).message, {});
  }
  const s = (k: string): string | undefined => values[k] as string | undefined;
  const count = num('count', s('count')) ?? 1;
  if (!Number.isInteger(count) || count < 1)
    throw new KvgateError('KVG_ERR_INVALID_CONFIG', `--count ${count}: must be a positive integer`, { field: 'count' });
  const port = num('port', s('port')) ?? CLI_PORT_DEFAULTS.port;
  const eventsPort = num('kv-events-port', s('kv-events-port')) ?? CLI_PORT_DEFAULTS.kvEventsPort;
  const replayPort = num('kv-events-replay-port', s('kv-events-replay-port'));
  const bootstrapPort = num('bootstrap-port', s('bootstrap-port')) ?? CLI_PORT_DEFAULTS.bootstrapPort;
  const dpSize = num('dp-size', s('dp-size')) ?? MOCKER_DEFAULTS.dpSize;
  const engineHashSeed = engineHashSeedFlag(s('engine-hash-seed'));
  const tokenizer = tokenizerFlags(s('tokenizer'), s('tokenizer-config'));
  const offset = (base: number | undefined, step: number, i: number): number | undefined =>
    base === undefined ? undefined : base === 0 ? 0 : base + step * i;
  const engines: MockerInput[] = [];
  for (let i = 0; i < count; i++) {
    engines.push({
      host: s('host'),
      port: offset(port, 1, i),
      model: s('model'),
      loraNames: values.lora as string[] | undefined,
      engine: s('engine') as MockerInput['engine'],
      mode: s('mode') as MockerInput['mode'],
      numGpuBlocks: num('num-gpu-blocks', s('num-gpu-blocks')),
      kvGroups: s('kv-groups'),
      blockSize: num('block-size', s('block-size')),
      maxNumBatchedTokens: num('max-num-batched-tokens', s('max-num-batched-tokens')),
      maxNumSeqs: num('max-num-seqs', s('max-num-seqs')),
      schedulingPolicy: s('scheduling-policy') as MockerInput['schedulingPolicy'],
      evictionPolicy: s('eviction-policy') as MockerInput['evictionPolicy'],
      anthropicInlineSystem: s('anthropic-inline-system') as MockerInput['anthropicInlineSystem'],
      maxModelLen: num('max-model-len', s('max-model-len')),
      speedup: num('speedup', s('speedup')),
      perfProfile: s('perf-profile'),
      dpSize,
      kvEvents: values['no-kv-events'] !== true,
      kvEventsPort: offset(eventsPort, dpSize, i),
      kvEventsReplayPort: offset(replayPort, dpSize, i),
      kvEventsEncoding: s('kv-events-encoding') as MockerInput['kvEventsEncoding'],
      kvEventsTopic: s('kv-events-topic'),
      kvEventsBufferSteps: num('kv-events-buffer-steps', s('kv-events-buffer-steps')),
      bootstrapPort: offset(bootstrapPort, 1, i),
      bootstrapTimeoutMs: num('bootstrap-timeout-ms', s('bootstrap-timeout-ms')),
      kvBytesPerToken: num('kv-bytes-per-token', s('kv-bytes-per-token')),
      kvTransferBandwidthGBps: num('kv-transfer-bandwidth', s('kv-transfer-bandwidth')),
      kvLeaseMs: num('kv-lease-ms', s('kv-lease-ms')),
      seed: num('seed', s('seed')),
      engineHashSeed: engineHashSeed === undefined ? undefined : engineHashSeed + BigInt(i),
      tokenizer,
      defaultMaxTokens: num('default-max-tokens', s('default-max-tokens')),
      faults: faultFlags(values),
    });
  }
  return { help: values.help === true, engines };
}

/** Starts every planned engine, writing one JSON line each; on failure closes those already started. */
export async function startMockers(plan: MockerCliPlan, writeLine: (line: string) => void): Promise<MockerHandle[]> {
  const handles: MockerHandle[] = [];
  try {
    for (const [index, opts] of plan.engines.entries()) {
      const h = await startMocker(opts);
      handles.push(h);
      writeLine(JSON.stringify({ index, ...h.describe() }));
    }
  } catch (err) {
    await Promise.all(handles.map((h) => h.close()));
    throw err;
  }
  return handles;
}

export async function mockerCommand(argv: string[]): Promise<number> {
  let plan: MockerCliPlan;
  try {
    plan = parseMockerArgs(argv);
  } catch (err) {
    process.stderr.write(`kvgate mocker: ${(err as Error).message}\n\n${MOCKER_HELP}`);
    return 2;
  }
  if (plan.help) {
    process.stdout.write(MOCKER_HELP);
    return 0;
  }
  let handles: MockerHandle[];
  try {
    handles = await startMockers(plan, (line) => process.stdout.write(`${line}\n`));
  } catch (err) {
    process.stderr.write(`kvgate mocker: ${(err as Error).message}\n`);
    return 1;
  }
  await new Promise<void>((resolve) => {
    process.once('SIGINT', resolve);
    process.once('SIGTERM', resolve);
  });
  await Promise.all(handles.map((h) => h.close()));
  return 0;
}
