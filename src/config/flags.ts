/**
 * `kvgate serve` flags (node:util parseArgs). Flags do not build a config of
 * their own: each becomes an override of one field path in the config
 * document, applied on top of the file before validation, so a bad flag value
 * is reported like a bad file value but names the flag. Router knobs take
 * Dynamo's flag names (`--router-temperature 0.5`, `--no-router-kv-events`),
 * read from the router flag table (router-flags.ts).
 */
import { parseArgs, type ParseArgsConfig } from 'node:util';
import { distance } from 'fastest-levenshtein';
import { parse as parseYaml } from 'yaml';
import { KV_ROUTER_DEFAULTS, type KvRouterConfig } from '../core/index.js';
import { ROUTER_FLAG_FIELDS, kvRouterOptionsFromFlags, type RouterFlagField } from './router-flags.js';
import { KvgateError, isKvgateError } from '../errors/index.js';
import type { FieldPath } from './reader.js';

/** One flag's effect: set `path` in the document to `value`. */
export interface ConfigOverride {
  /** Path into the document; `models[*]` (the string '*') means every model. */
  path: readonly (string | number)[];
  value: unknown;
  /** The flag as typed (for error messages), e.g. `--port`. */
  flag: string;
  /** Set only where the field already exists (a flag beating per-model router sections). */
  onlyIfPresent?: boolean;
}

export interface ServeFlags {
  configFile: string | undefined;
  overrides: ConfigOverride[];
  help: boolean;
}

type OptionSpec = NonNullable<ParseArgsConfig['options']>[string];

const FLAG_OPTIONS: Record<string, OptionSpec> = {
  config: { type: 'string', short: 'c' },
  host: { type: 'string' },
  port: { type: 'string', short: 'p' },
  admin: { type: 'boolean' },
  'admin-port': { type: 'string' },
  'api-key': { type: 'string', multiple: true },
  'max-body-bytes': { type: 'string' },
  'max-response-bytes': { type: 'string' },
  'max-prompt-tokens': { type: 'string' },
  'max-concurrent-requests': { type: 'string' },
  'max-concurrent-requests-per-client': { type: 'string' },
  'request-timeout-ms': { type: 'string' },
  'engine-first-byte-timeout-ms': { type: 'string' },
  'engine-stream-idle-timeout-ms': { type: 'string' },
  'migration-limit': { type: 'string' },
  'migration-max-seq-len': { type: 'string' },
  'drain-timeout-ms': { type: 'string' },
  'preprocess-threads': { type: 'string' },
  processes: { type: 'string' },
  'pid-file': { type: 'string' },
  'segment-cache-tokens': { type: 'string' },
  'segment-cache-bytes': { type: 'string' },
  'log-level': { type: 'string' },
  model: { type: 'string' },
  worker: { type: 'string', multiple: true },
  tokenizer: { type: 'string' },
  'router-mode': { type: 'string' },
  'router-preset': { type: 'string' },
  'block-size': { type: 'string' },
  engine: { type: 'string' },
  'enforce-disagg': { type: 'boolean' },
  set: { type: 'string', multiple: true },
  'replica-sync-nats': { type: 'string', multiple: true },
  'router-id': { type: 'string' },
  help: { type: 'boolean', short: 'h' },
};

/** Flags that set one field: flag -> path (`*` = every model). */
const SCALAR_FLAGS: Record<string, readonly (string | number)[]> = {
  host: ['listen', 'host'],
  port: ['listen', 'port'],
  'max-body-bytes': ['limits', 'max_body_bytes'],
  'max-response-bytes': ['limits', 'max_response_bytes'],
  'max-prompt-tokens': ['limits', 'max_prompt_tokens'],
  'max-concurrent-requests': ['limits', 'max_concurrent_requests'],
  'max-concurrent-requests-per-client': ['limits', 'max_concurrent_requests_per_client'],
  'request-timeout-ms': ['limits', 'request_timeout_ms'],
  'engine-first-byte-timeout-ms': ['engine_timeouts', 'first_byte_timeout_ms'],
  'engine-stream-idle-timeout-ms': ['engine_timeouts', 'stream_idle_timeout_ms'],
  'drain-timeout-ms': ['shutdown', 'drain_timeout_ms'],
  'preprocess-threads': ['preprocess', 'threads'],
  processes: ['processes'],
  'pid-file': ['pid_file'],
  'segment-cache-tokens': ['preprocess', 'segment_cache_tokens'],
  'segment-cache-bytes': ['preprocess', 'segment_cache_bytes'],
  'conversation-cache-bytes': ['preprocess', 'conversation_cache_bytes'],
  'log-level': ['log', 'level'],
  'router-id': ['replicas', 'router_id'],
  tokenizer: ['models', '*', 'tokenizer'],
  'router-mode': ['models', '*', 'router_mode'],
  'router-preset': ['models', '*', 'router', 'router_preset'],
  'block-size': ['models', '*', 'block_size'],
  engine: ['models', '*', 'engine'],
  'migration-limit': ['models', '*', 'migration_limit'],
  'migration-max-seq-len': ['models', '*', 'migration_max_seq_len'],
};

/** Router knob flags from the router flag table: flag name (no dashes) -> [field, Dynamo name, is boolean]. */
function routerFlagTable(): Map<string, { dynamo: string; boolean: boolean; flag: string }> {
  const out = new Map<string, { dynamo: string; boolean: boolean; flag: string }>();
  for (const spec of Object.values(ROUTER_FLAG_FIELDS)) {
    const isBool = spec.kind === 'boolean';
    if (spec.flag !== null) out.set(spec.flag.slice(2), { dynamo: spec.dynamo, boolean: isBool, flag: spec.flag });
    if (spec.negativeFlag !== undefined)
      out.set(spec.negativeFlag.slice(2), { dynamo: spec.dynamo, boolean: true, flag: spec.negativeFlag });
  }
  return out;
}

/** Numbers stay numbers; anything else stays a string so validation can name it. */
function scalar(v: string): unknown {
  return /^-?\d+(\.\d+)?$/.test(v.trim()) ? Number(v) : v;
}

/** Parses `models[0].workers[1].url` into a path. */
export function parseFieldPath(text: string): FieldPath | undefined {
  const out: (string | number)[] = [];
  const re = /([A-Za-z_][A-Za-z0-9_]*)|\[(\d+)\]|(\.)/gy;
  let m: RegExpExecArray | null;
  let expectKey = true;
  while ((m = re.exec(text)) !== null) {
    if (m[1] !== undefined) {
      if (!expectKey) return undefined;
      out.push(m[1]);
      expectKey = false;
    } else if (m[2] !== undefined) {
      if (expectKey) return undefined;
      out.push(Number(m[2]));
    } else {
      if (expectKey) return undefined;
      expectKey = true;
    }
    if (re.lastIndex === text.length) break;
  }
  if (re.lastIndex !== text.length || expectKey || out.length === 0) return undefined;
  return out;
}

function flagError(flag: string, reason: string): KvgateError {
  return new KvgateError('KVG_ERR_INVALID_CONFIG', `${flag}: ${reason}`, { source: flag, reason });
}

/**
 * `--worker` value: a URL, or comma-separated key=value pairs with the worker
 * fields of the config file (`url=http://h:8000,kv_events=tcp://h:5557,dp_size=2`).
 */
function parseWorkerFlag(spec: string, index: number): Record<string, unknown> {
  const s = spec.trim();
  if (!s.includes('=')) return { id: index + 1, url: s };
  const out: Record<string, unknown> = { id: index + 1 };
  for (const part of s.split(',')) {
    const eq = part.indexOf('=');
    if (eq <= 0)
      throw flagError('--worker', `expects key=value pairs separated by commas, got ${JSON.stringify(part)}`);
    out[part.slice(0, eq).trim()] = scalar(part.slice(eq + 1).trim());
  }
  return out;
}

/**
 * The closest known flag to a mistyped one: the unique flag it is a prefix of, else the nearest by
 * edit distance when that distance is small next to what was typed (at most a third of its length,
 * and 2 so a swapped pair of letters is still caught, but less than its whole length). Undefined
 * when nothing is close.
 */
export function closestFlag(typed: string, known: readonly string[]): string | undefined {
  const bare = typed.replace(/^-+/, '').split('=')[0]!;
  if (bare === '') return undefined;
  const names = known.map((k) => k.replace(/^-+/, ''));
  const prefixed = names.filter((n) => n.startsWith(bare));
  if (bare.length >= 3 && prefixed.length === 1) return `--${prefixed[0]!}`;
  let best: string | undefined;
  let bestDistance = Infinity;
  for (const n of names) {
    const d = distance(bare, n);
    if (d < bestDistance) {
      best = n;
      bestDistance = d;
    }
  }
  // Never suggest a flag that shares nothing with what was typed (`-x` is not a typo of `--h`).
  const limit = Math.min(bare.length - 1, Math.max(2, Math.floor(bare.length / 3)));
  return best !== undefined && bestDistance <= limit ? `--${best}` : undefined;
}

/**
 * node:util parseArgs in strict mode, no positionals, with a "did you mean" on unknown options
 * (the closest of the command's own flags). Every kvgate subcommand parses its flags through this.
 * @throws Error with parseArgs' message, plus the suggestion for an unknown option.
 */
export function parseCommandArgs(
  argv: readonly string[],
  options: NonNullable<ParseArgsConfig['options']>,
): Record<string, string | boolean | string[] | undefined> {
  try {
    return parseArgs({ args: [...argv], options: { ...options }, allowPositionals: false, strict: true })
      .values as Record<string, string | boolean | string[] | undefined>;
  } catch (err) {
    const message = (err as Error).message;
    const unknown = /^Unknown option '([^']+)'/.exec(message)?.[1];
    const suggestion = unknown === undefined ? undefined : closestFlag(unknown, Object.keys(options));
    if (suggestion === undefined) throw err;
    throw new Error(`${message}; did you mean ${suggestion}?`, { cause: err });
  }
}

/**
 * Parses `kvgate serve` arguments.
 * @throws KvgateError KVG_ERR_INVALID_CONFIG for unknown flags, missing values and malformed `--set`/`--worker`.
 */
export function parseServeFlags(argv: readonly string[]): ServeFlags {
  const routerFlags = routerFlagTable();
  const options: Record<string, OptionSpec> = { ...FLAG_OPTIONS };
  for (const [name, r] of routerFlags) options[name] = { type: r.boolean ? 'boolean' : 'string' };
  let v: Record<string, string | boolean | string[] | undefined>;
  try {
    v = parseCommandArgs(argv, options);
  } catch (err) {
    // No command prefix here: the command writes its own (`kvgate serve: ...`).
    throw new KvgateError('KVG_ERR_INVALID_CONFIG', (err as Error).message, { source: 'flags' }, { cause: err });
  }
  const overrides: ConfigOverride[] = [];
  // A model defined by flags comes first, so the flags that apply to every model
  // (--tokenizer, --block-size, --router-mode, --engine, --enforce-disagg) apply to it too.
  if (typeof v.model === 'string' || Array.isArray(v.worker)) {
    if (typeof v.model !== 'string') throw flagError('--worker', 'needs --model NAME (the model these workers serve)');
    const workers = (Array.isArray(v.worker) ? v.worker : []).map((w, i) => parseWorkerFlag(w, i));
    overrides.push({
      path: ['models'],
      value: [{ name: v.model, workers }],
      flag: Array.isArray(v.worker) ? '--worker' : '--model',
    });
  }

  for (const [name, path] of Object.entries(SCALAR_FLAGS)) {
    const value = v[name];
    if (typeof value === 'string')
      overrides.push({
        path,
        value: path.at(-1) === 'host' || name === 'tokenizer' || name === 'router-id' ? value : scalar(value),
        flag: `--${name}`,
      });
  }
  if (v.admin === true) overrides.push({ path: ['admin', 'enabled'], value: true, flag: '--admin' });
  if (typeof v['admin-port'] === 'string') {
    overrides.push({ path: ['admin', 'enabled'], value: true, flag: '--admin-port' });
    overrides.push({ path: ['admin', 'port'], value: scalar(v['admin-port']), flag: '--admin-port' });
  }
  if (Array.isArray(v['api-key']))
    overrides.push({ path: ['auth', 'api_keys'], value: v['api-key'], flag: '--api-key' });
  if (Array.isArray(v['replica-sync-nats'])) {
    const servers = v['replica-sync-nats']
      .flatMap((s) => s.split(','))
      .map((s) => s.trim())
      .filter((s) => s !== '');
    overrides.push({ path: ['replicas', 'nats', 'servers'], value: servers, flag: '--replica-sync-nats' });
  }
  if (v['enforce-disagg'] === true)
    overrides.push({ path: ['models', '*', 'enforce_disagg'], value: true, flag: '--enforce-disagg' });

  overrides.push(...routerOverrides(routerFlags, v), ...setOverrides(v.set));
  return { configFile: typeof v.config === 'string' ? v.config : undefined, overrides, help: v.help === true };
}

/** The router knobs given as flags (Dynamo's names), each set in `router` and in every model's own router section. */
function routerOverrides(
  routerFlags: ReturnType<typeof routerFlagTable>,
  v: Record<string, string | boolean | string[] | undefined>,
): ConfigOverride[] {
  const overrides: ConfigOverride[] = [];
  const routerGiven: Record<string, string | boolean> = {};
  for (const [name, r] of routerFlags) {
    const value = v[name];
    if (value !== undefined) routerGiven[r.flag] = value as string | boolean;
  }
  if (Object.keys(routerGiven).length === 0) return overrides;
  let opts: Record<string, unknown>;
  try {
    opts = kvRouterOptionsFromFlags(routerGiven) as Record<string, unknown>;
  } catch (err) {
    if (isKvgateError(err))
      throw flagError(String(err.detail?.field ?? 'router flag'), String(err.detail?.reason ?? err.message));
    throw err;
  }
  for (const [field, value] of Object.entries(opts)) {
    const spec = ROUTER_FLAG_FIELDS[field as keyof typeof ROUTER_FLAG_FIELDS];
    const flag = Object.keys(routerGiven).find((f) => f === spec.flag || f === spec.negativeFlag) ?? spec.flag ?? field;
    overrides.push({ path: ['router', spec.dynamo], value, flag });
    // A flag beats the file everywhere, including per-model router sections.
    overrides.push({ path: ['models', '*', 'router', spec.dynamo], value, flag, onlyIfPresent: true });
  }
  return overrides;
}

/** `--set path=value` items, each value read as YAML. */
function setOverrides(items: string | boolean | string[] | undefined): ConfigOverride[] {
  const overrides: ConfigOverride[] = [];
  for (const item of Array.isArray(items) ? items : []) {
    const eq = item.indexOf('=');
    const path = eq > 0 ? parseFieldPath(item.slice(0, eq).trim()) : undefined;
    if (path === undefined)
      throw flagError('--set', `expects path=value such as limits.max_body_bytes=1048576, got ${JSON.stringify(item)}`);
    let value: unknown;
    try {
      value = parseYaml(item.slice(eq + 1));
    } catch (err) {
      throw flagError(`--set ${item.slice(0, eq)}`, `value does not parse: ${(err as Error).message.split('\n')[0]}`);
    }
    overrides.push({ path, value, flag: `--set ${item.slice(0, eq)}` });
  }
  return overrides;
}

/** `kvgate serve --help`. */
export function serveUsage(): string {
  return `usage: kvgate serve [-c config.yaml] [options]

Serves an OpenAI-compatible API in front of a fleet of engines. Without any
model configured, starts the embedded demo (simulated engines in-process).

  -c, --config FILE            YAML or JSON config file (see README "Configuration")
      --host HOST              listen address (default 127.0.0.1)
  -p, --port PORT              listen port (default 8080; 0 = any free port)
      --model NAME             define one model from flags (with --worker)
      --worker SPEC            a worker: URL, or url=...,id=...,kv_events=tcp://h:p,dp_size=N,role=...
      --tokenizer SPEC         none | demo | path to tokenizer.json or its folder (every model)
      --router-mode MODE       kv | round-robin | random | power-of-two | least-loaded | direct
      --router-preset NAME     kv | dynamo | dynamo-agentic | llm-d | lmetric: a peer's router knobs (every model)
      --block-size N           KV block size in tokens (every model)
      --engine DIALECT         vllm | sglang (every model)
      --enforce-disagg         fail rather than serve aggregated when no prefill worker can
      --api-key KEY            accept this bearer key (repeatable); prefer auth.api_keys_env
      --admin                  serve /admin/* on the public listener
      --admin-port PORT        serve /admin/* on a separate listener instead
      --max-body-bytes N  --max-prompt-tokens N  --max-concurrent-requests N
      --max-concurrent-requests-per-client N  of those, one client's (as limits.client_address names it; 0 = off)
      --max-response-bytes N   the largest answer held whole (an engine's unstreamed one, a stream: false one assembled)
      --request-timeout-ms N  --drain-timeout-ms N
      --engine-first-byte-timeout-ms N   per engine leg: dispatch to first output (0 = off)
      --engine-stream-idle-timeout-ms N  per engine leg: longest silence between two SSE events (0 = off)
      --migration-limit N                broken streams resumed on another worker per request (3; 0 = off)
      --migration-max-seq-len N          no migration once prompt + generated tokens exceed N (no bound)
      --preprocess-threads N   tokenizer threads (0 = main thread; default: the spare cores shared by the processes)
      --processes N            gateway processes on the one port, sharing bookings and sessions (default 1)
      --pid-file FILE          write the process id to FILE (kill -HUP "$(cat FILE)" reloads); removed on exit
      --segment-cache-tokens N per-thread segment cache size in token ids (0 = off)
      --segment-cache-bytes N  per-thread segment cache size in retained bytes (0 = off)
      --log-level LEVEL        fatal | error | warn | info | debug | trace | silent
      --replica-sync-nats URL  share bookings and sessions with other kvgate replicas over NATS (repeatable)
      --router-id ID           this replica's id among its peers (default: random)
      --set PATH=VALUE         set any config field, e.g. --set models[0].block_size=32
  -h, --help

Router knobs (Dynamo's flag names; they override the file everywhere; default in brackets):
${routerKnobsHelp()}`;
}

/** What a knob's flag takes, as shown in help. */
const VALUE_SHAPE: Readonly<Record<RouterFlagField['kind'], string>> = {
  nonNegative: 'X',
  positive: 'X',
  positiveOrNull: 'X|none',
  boolean: '',
  queuePolicy: 'POLICY',
  prefillLoadModel: 'MODEL',
  tiers: 'JSON|none',
};

function defaultText(field: string): string {
  if (!Object.hasOwn(KV_ROUTER_DEFAULTS, field)) return '';
  const v = KV_ROUTER_DEFAULTS[field as keyof KvRouterConfig];
  if (v === null) return ' [off]';
  if (typeof v === 'boolean') return v ? ' [on]' : ' [off]';
  return ` [${typeof v === 'string' ? v : JSON.stringify(v)}]`;
}

/**
 * Two lines per knob (its flag and value, then what it does), from the router flag table; knobs
 * without a flag of their own (Dynamo sets them by environment variable) come last, named by field.
 */
function routerKnobsHelp(): string {
  const entries = Object.entries(ROUTER_FLAG_FIELDS);
  const withFlag = entries.filter(([, spec]) => spec.flag !== null);
  const withoutFlag = entries.filter(([, spec]) => spec.flag === null);
  const line = (field: string, spec: RouterFlagField, name: string): string =>
    `  ${name}\n        ${spec.help}${defaultText(field)}\n`;
  return [
    ...withFlag.map(([field, spec]) => {
      const shape = VALUE_SHAPE[spec.kind];
      const flag = spec.negativeFlag === undefined ? spec.flag! : `--[no-]${spec.flag!.slice(2)}`;
      return line(field, spec, shape === '' ? flag : `${flag} ${shape}`);
    }),
    ...withoutFlag.map(([field, spec]) => line(field, spec, `(no flag: router.${spec.dynamo} in the file, or --set)`)),
  ].join('');
}
