/**
 * One `models[i]` entry: its tokenizer, workers (with their KV-event
 * endpoints and SGLang bootstrap servers), router knobs, and the cross-field
 * rules of one model (disaggregation shape, KV events for KV routing).
 */
import { existsSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import {
  ENGINE_DIALECTS,
  INLINE_SYSTEM_OPTIONS,
  ROUTER_MODES,
  WORKER_ROLES,
  type EngineDialect,
} from '../common/index.js';
import { ALWAYS_DISAGGREGATE, DISAGG_POLICY_MODES, kvEventsEnabled, type DisaggPolicy } from '../core/index.js';
import type { KvEventEndpoints } from '../discovery/index.js';
import { absolute, checkHost, checkEngineUrl, checkZmqEndpoint, type ResolveContext } from './checks.js';
import { GATEWAY_DEFAULTS } from './defaults.js';
import { readEtcdSection, readInferencePoolSection, readKubernetesSection } from './discovery-sections.js';
import { ConfigReader, isPlainObject, show, type FieldPath } from './reader.js';
import { readRouterKnobs, resolveRouter, routerPresetOf, type RouterKnobs } from './resolve-router.js';
import { readClientPins, readSessionKeys } from './resolve-sessions.js';
import type { EngineTimeouts, ModelConfig, TokenizerSource, WorkerConfig } from './types.js';

const MODEL_KEYS = [
  'name',
  'served_model_name',
  'lora_adapters',
  'router_mode',
  'block_size',
  'tokenizer',
  'on_missing_tokenizer',
  'verify_tokenizer',
  'engine',
  'enforce_disagg',
  'disagg_policy',
  'eagle',
  'anthropic_inline_system',
  'session_priority',
  'session_affinity',
  'client_pins',
  'max_prompt_tokens',
  'router',
  'workers',
  'engine_timeouts',
  'workers_file',
  'etcd',
  'kubernetes',
  'inference_pool',
  'migration_limit',
  'migration_max_seq_len',
  'panic_threshold_percent',
] as const;
const WORKER_KEYS = [
  'id',
  'url',
  'role',
  'engine',
  'dp_size',
  'dp_start',
  'kv_events',
  'bootstrap_host',
  'bootstrap_port',
  'max_num_batched_tokens',
  'total_kv_blocks',
  'serves_aggregated',
  'return_token_ids',
  'taints',
] as const;

function readTokenizer(m: ConfigReader, ctx: ResolveContext): TokenizerSource {
  const onMissing = m.oneOf('on_missing_tokenizer', ['approximate', 'reject'] as const, 'approximate');
  const v = m.node.tokenizer;
  if (v === undefined || v === null || v === 'none') return { kind: 'none', onMissing };
  if (v === 'demo') return { kind: 'demo' };
  const checkFile = (key: FieldPath, p: string): string => {
    const path = absolute(ctx, p);
    if (!existsSync(path)) m.problemAt(key, `file not found: ${path}`);
    return path;
  };
  if (typeof v === 'string') {
    const path = absolute(ctx, v);
    let isDir = false;
    try {
      isDir = statSync(path).isDirectory();
    } catch {
      m.problem('tokenizer', `no such file or directory: ${path}`);
      return { kind: 'none', onMissing };
    }
    const json = isDir ? join(path, 'tokenizer.json') : path;
    if (!existsSync(json)) m.problem('tokenizer', `no tokenizer.json in ${path}`);
    const cfg = join(dirname(json), 'tokenizer_config.json');
    if (existsSync(json) && !existsSync(cfg)) {
      // Without it the chat template is a guess: chat prompts would hash to token ids the engine never computes.
      m.problem(
        'tokenizer',
        `no tokenizer_config.json beside ${json}: it holds the model's chat template, and a guessed template routes on ` +
          `token ids the engine never computes; copy it from the model's folder, or name the template: ` +
          `tokenizer: { json: ${json}, template: chatml | FILE.jinja }`,
      );
    }
    return { kind: 'files', files: { tokenizerJson: json, tokenizerConfig: cfg } };
  }
  if (!isPlainObject(v)) {
    m.problem('tokenizer', `must be "none", "demo", a path, or {json, config}; got ${show(v)}`);
    return { kind: 'none', onMissing };
  }
  const t = m.child('tokenizer')!;
  t.allowOnly(['json', 'config', 'template']);
  const json = t.reqStr('json');
  const config = t.optStr('config');
  const template = t.optStr('template');
  return {
    kind: 'files',
    files: {
      tokenizerJson: json === '' ? '' : checkFile([...t.path, 'json'], json),
      tokenizerConfig: config === undefined ? undefined : checkFile([...t.path, 'config'], config),
      chatTemplate:
        template === undefined || template === 'chatml' ? template : checkFile([...t.path, 'template'], template),
    },
  };
}

function readKvEvents(w: ConfigReader): KvEventEndpoints | undefined {
  const v = w.node.kv_events;
  if (v === undefined || v === null) return undefined;
  if (typeof v === 'string') {
    const endpoint = w.str('kv_events', '', checkZmqEndpoint);
    return endpoint === '' ? undefined : { endpoint };
  }
  const k = w.child('kv_events');
  if (k === undefined) return undefined;
  k.allowOnly(['endpoint', 'replay', 'topic', 'dp_port_stride']);
  const endpoint = k.reqStr('endpoint', checkZmqEndpoint);
  const replayEndpoint = k.optStr('replay', checkZmqEndpoint);
  const topic =
    typeof k.node.topic === 'string'
      ? k.node.topic
      : k.node.topic === undefined
        ? undefined
        : (k.problem('topic', `must be a string, got ${show(k.node.topic)}`), undefined);
  const dpPortStride = k.optInt('dp_port_stride', { min: 0, max: 1000 });
  return { endpoint, replayEndpoint, topic, dpPortStride };
}

/** A model name as engines and clients spell it (Hugging Face ids have slashes). */
const checkModelName = (s: string): string | undefined =>
  s.length <= 256 && !/[\s]/.test(s) ? undefined : 'must be at most 256 characters without whitespace';

/** `lora_adapters`: distinct adapter names, none equal to the model's own names. */
function readLoraAdapters(m: ConfigReader, names: readonly string[]): string[] {
  const list = m.list('lora_adapters') ?? [];
  const out: string[] = [];
  list.forEach((v, i) => {
    const path = [...m.path, 'lora_adapters', i];
    if (typeof v !== 'string' || v === '' || checkModelName(v) !== undefined)
      m.problemAt(path, `must be an adapter name (a non-empty string without whitespace), got ${show(v)}`);
    else if (names.includes(v)) m.problemAt(path, `${v} is the model's own name; an adapter needs a name of its own`);
    else if (out.includes(v)) m.problemAt(path, `${v} is listed twice`);
    else out.push(v);
  });
  return out;
}

export interface ModelNames {
  readonly name: string;
  readonly servedModelName: string;
  readonly loraAdapters: readonly string[];
}

function readWorker(w: ConfigReader, modelEngine: EngineDialect, names: ModelNames): WorkerConfig {
  w.allowOnly(WORKER_KEYS);
  const id = w.reqInt('id', { min: 0, max: Number.MAX_SAFE_INTEGER });
  const url = w.reqStr('url', checkEngineUrl).replace(/\/+$/, '');
  const role = w.oneOf('role', WORKER_ROLES, 'aggregated');
  const dialect = w.oneOf('engine', ENGINE_DIALECTS, modelEngine);
  const dpSize = w.int('dp_size', 1, { min: 1, max: 1024 });
  const dpStart = w.int('dp_start', 0, { min: 0, max: 65535 });
  const kvEvents = readKvEvents(w);
  let bootstrap: { host: string; port: number } | undefined;
  const hasBootstrap = w.has('bootstrap_host') || w.has('bootstrap_port');
  if (role === 'prefill' && dialect === 'sglang') {
    let urlHost = '';
    try {
      urlHost = new URL(url).hostname.replace(/^\[|\]$/g, '');
    } catch {
      // the url problem is already recorded
    }
    bootstrap = {
      host: w.str('bootstrap_host', urlHost, checkHost),
      port: w.int('bootstrap_port', GATEWAY_DEFAULTS.sglangBootstrapPort, { min: 1, max: 65535 }),
    };
  } else if (hasBootstrap) {
    w.problem(
      w.has('bootstrap_host') ? 'bootstrap_host' : 'bootstrap_port',
      'only SGLang prefill workers have a bootstrap server (role: prefill, engine: sglang)',
    );
  }
  if (role !== 'decode' && w.has('serves_aggregated'))
    w.problem('serves_aggregated', 'only decode workers say whether they can serve a request alone');
  const servesAggregated = role === 'decode' ? w.bool('serves_aggregated', false) : undefined;
  // vLLM >= 0.10.2 sends its token ids on request; other engines only when the operator says they do.
  const returnsTokenIds = w.bool('return_token_ids', dialect === 'vllm');
  return {
    id,
    model: names.name,
    servedModelName: names.servedModelName,
    loraAdapters: names.loraAdapters,
    url,
    role,
    dialect,
    dpStart,
    dpSize,
    kvEvents,
    bootstrap,
    ...(servesAggregated === true ? { servesAggregated } : {}),
    ...(returnsTokenIds !== (dialect === 'vllm') ? { returnsTokenIds } : {}),
    maxNumBatchedTokens: w.optInt('max_num_batched_tokens', { min: 1 }),
    totalKvBlocks: w.optInt('total_kv_blocks', { min: 1 }),
    ...readTaints(w),
  };
}

/** A taint: what `nvext.routing_constraints` names; Kubernetes label-name characters, so a label can carry one. */
const TAINT = /^[A-Za-z0-9]([A-Za-z0-9._/-]{0,126}[A-Za-z0-9])?$/;

/** A worker's `taints` (a list of distinct names), omitted from the worker when empty. */
function readTaints(w: ConfigReader): { taints?: readonly string[] } {
  const list = w.list('taints');
  if (list === undefined) return {};
  const out: string[] = [];
  list.forEach((v, i) => {
    if (typeof v !== 'string' || !TAINT.test(v))
      w.problemAt(
        [...w.path, 'taints', i],
        `must be a taint name (1 to 128 letters, digits, '.', '_', '/', '-'; alphanumeric at both ends), got ${show(v)}`,
      );
    else if (!out.includes(v)) out.push(v);
  });
  return out.length > 0 ? { taints: out } : {};
}

/** A model's `disagg_policy` (core's `DisaggPolicy`): a bound is required by the modes that read it. */
function readDisaggPolicy(p: ConfigReader | undefined, routerMode: string): DisaggPolicy {
  if (p === undefined) return ALWAYS_DISAGGREGATE;
  p.allowOnly(['mode', 'min_input_tokens', 'max_prefill_load_tokens']);
  const mode = p.oneOf('mode', DISAGG_POLICY_MODES, 'always');
  const byLength = mode === 'input_length' || mode === 'either';
  const byLoad = mode === 'prefill_load' || mode === 'either';
  if (byLoad && routerMode !== 'kv')
    p.problem('mode', `${mode} reads the prefill pool's queued prefill tokens, which only router_mode kv tracks`);
  for (const [key, needed] of [
    ['min_input_tokens', byLength],
    ['max_prefill_load_tokens', byLoad],
  ] as const)
    if (needed && !p.has(key)) p.problem(key, `is required by mode ${mode}`);
    else if (!needed && p.has(key)) p.problem(key, `is not read by mode ${mode}`);
  return {
    mode,
    minInputTokens: byLength ? p.int('min_input_tokens', 0, { min: 1 }) : 0,
    maxPrefillLoadTokens: byLoad ? p.int('max_prefill_load_tokens', 0, { min: 0 }) : 0,
  };
}

/** An `engine_timeouts` section (top level, or a model's own over it): each field falls back to `base`. */
export function readEngineTimeouts(t: ConfigReader | undefined, base: EngineTimeouts): EngineTimeouts {
  if (t === undefined) return base;
  t.allowOnly(['first_byte_timeout_ms', 'stream_idle_timeout_ms']);
  return {
    firstByteMs: t.int('first_byte_timeout_ms', base.firstByteMs, { min: 0, max: 86_400_000 }),
    streamIdleMs: t.int('stream_idle_timeout_ms', base.streamIdleMs, { min: 0, max: 86_400_000 }),
  };
}

/** Reads one model entry; `globalRouter` and `timeouts` are the top-level sections it is merged over. */
export function readModel(
  m: ConfigReader,
  ctx: ResolveContext,
  globalRouter: RouterKnobs,
  maxPromptTokens: number,
  root: ConfigReader,
  timeouts: EngineTimeouts,
): ModelConfig {
  m.allowOnly(MODEL_KEYS);
  const name = m.reqStr('name', checkModelName);
  const servedModelName = m.str('served_model_name', name, checkModelName);
  const loraAdapters = readLoraAdapters(m, [name, servedModelName]);
  const names: ModelNames = { name, servedModelName, loraAdapters };
  const routerMode = m.oneOf('router_mode', ROUTER_MODES, GATEWAY_DEFAULTS.routerMode);
  const blockSize = m.int('block_size', GATEWAY_DEFAULTS.blockSize, { min: 1, max: 1 << 20 });
  const tokenizer = readTokenizer(m, ctx);
  const verifyTokenizer = m.bool('verify_tokenizer', false);
  const engine = m.oneOf('engine', ENGINE_DIALECTS, GATEWAY_DEFAULTS.engine);
  const enforceDisagg = m.bool('enforce_disagg', false);
  const disaggPolicy = readDisaggPolicy(m.child('disagg_policy'), routerMode);
  const eagle = m.bool('eagle', false);
  const anthropicInlineSystem = m.oneOf('anthropic_inline_system', INLINE_SYSTEM_OPTIONS, 'auto');
  const sessions = readSessionKeys(m, routerMode);
  const modelMax = m.int('max_prompt_tokens', maxPromptTokens, { min: 1 });
  const localRouter = readRouterKnobs(m.child('router'));
  const router = resolveRouter(root, globalRouter, localRouter, [...m.path, 'router']);
  // A discovery source may bring every worker: then the static list may be empty.
  const workersFile = m.optStr('workers_file');
  const etcd = readEtcdSection(m);
  const kubernetes = readKubernetesSection(m);
  const inferencePool = readInferencePoolSection(m);
  const workers = readWorkers(
    m,
    engine,
    names,
    workersFile === undefined && etcd === undefined && kubernetes === undefined && inferencePool === undefined,
  );
  const engineTimeouts = readEngineTimeouts(m.child('engine_timeouts'), timeouts);
  const migrationLimit = m.int('migration_limit', GATEWAY_DEFAULTS.migrationLimit, { min: 0, max: 100 });
  const migration = { limit: migrationLimit, maxSeqLen: m.optInt('migration_max_seq_len', { min: 1 }) };
  const panic = m.int('panic_threshold_percent', GATEWAY_DEFAULTS.panicThresholdPercent, { min: 0, max: 100 });
  return {
    name,
    servedModelName,
    loraAdapters,
    routerMode,
    blockSize,
    tokenizer,
    verifyTokenizer,
    enforceDisagg,
    disaggPolicy,
    eagle,
    anthropicInlineSystem,
    ...sessions,
    clientPins: readClientPins(m, routerMode),
    maxPromptTokens: modelMax,
    routerPreset: routerPresetOf(globalRouter, localRouter),
    router,
    workers,
    engineTimeouts,
    panicThresholdPercent: panic,
    migration,
    engine,
    workersFile: workersFile === undefined ? undefined : absolute(ctx, workersFile),
    etcd,
    kubernetes,
    inferencePool,
  };
}

/** The `workers` list of a node (a model entry, or a workers file); `required`: at least one. */
export function readWorkers(
  m: ConfigReader,
  engine: EngineDialect,
  names: ModelNames,
  required: boolean,
): WorkerConfig[] {
  const workers: WorkerConfig[] = [];
  const list = m.list('workers');
  if (required && (list === undefined || list.length === 0)) m.problem('workers', 'must list at least one worker');
  list?.forEach((node, i) => {
    const path = [...m.path, 'workers', i];
    if (!isPlainObject(node)) {
      m.problemAt(path, `must be an object with id and url, got ${show(node)}`);
      // A placeholder keeps workers[i] aligned with the file for later paths; the
      // problem above means this config is never used.
      workers.push({
        id: Number.NaN,
        model: names.name,
        url: '',
        role: 'aggregated',
        dialect: engine,
        dpStart: 0,
        dpSize: 1,
      });
      return;
    }
    workers.push(readWorker(m.at(path, node), engine, names));
  });
  return workers;
}

/** Cross-field rules of one model; `workerPaths[i]` is the path of `workers[i]`. */
export function checkModel(model: ModelConfig, m: ConfigReader, warnings: string[]): void {
  const roles = new Set(model.workers.map((w) => w.role));
  const prefill = model.workers.filter((w) => w.role === 'prefill');
  if (roles.has('aggregated') && (roles.has('prefill') || roles.has('decode'))) {
    m.problem(
      'workers',
      'mixes aggregated workers with prefill/decode workers; a model is either aggregated or disaggregated (prefill + decode)',
    );
  } else if (roles.has('decode') && !roles.has('prefill')) {
    m.problem('workers', 'has decode workers but no prefill worker');
  } else if (roles.has('prefill') && !roles.has('decode')) {
    m.problem('workers', 'has prefill workers but no decode worker');
  } else if (prefill.length > 0 && new Set(model.workers.map((w) => w.dialect)).size > 1) {
    m.problem(
      'workers',
      'mixes vllm and sglang workers; prefill and decode must speak the same disaggregation protocol',
    );
  }
  if (model.enforceDisagg && prefill.length === 0) m.problem('enforce_disagg', 'requires at least one prefill worker');
  if (model.routerMode === 'kv' && kvEventsEnabled(model.router)) {
    const raw = Array.isArray(m.node.workers) ? (m.node.workers as unknown[]) : [];
    model.workers.forEach((w, i) => {
      // Absent, not merely invalid (an invalid endpoint is already reported).
      if (w.kvEvents === undefined && isPlainObject(raw[i]) && raw[i].kv_events === undefined) {
        m.problemAt(
          [...m.path, 'workers', i, 'kv_events'],
          'is required in router_mode kv with KV events on; set it, or set router.use_kv_events: false (approximate mode)',
        );
      }
    });
    if (model.tokenizer.kind === 'none' && model.tokenizer.onMissing === 'approximate') {
      warnings.push(
        `model ${model.name}: no tokenizer; prefix hashes come from the byte-packing fallback tokenizer and match ` +
          "the engines' KV events only if the engines tokenize the same way (kvgate mockers do, real engines do not)",
      );
    }
  }
  // The same engine twice would be routed to (and booked) as two workers, its load split between them.
  const firstAt = new Map<string, number>();
  model.workers.forEach((w, i) => {
    if (w.url === '') return;
    const first = firstAt.get(w.url);
    if (first === undefined) firstAt.set(w.url, i);
    else m.problemAt([...m.path, 'workers', i, 'url'], `is the url of workers[${first}] too; list each engine once`);
  });
  if (model.verifyTokenizer && (model.routerMode !== 'kv' || !kvEventsEnabled(model.router))) {
    m.problem(
      'verify_tokenizer',
      "needs router_mode kv with KV events on: the probe compares the engines' BlockStored events with kvgate's tokenization",
    );
  }
  if (model.routerMode !== 'kv' && model.workers.some((w) => w.kvEvents !== undefined)) {
    warnings.push(
      `model ${model.name}: router_mode ${model.routerMode} does not use KV events; kv_events endpoints are ignored`,
    );
  }
}
