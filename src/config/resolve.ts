/**
 * Validation of the gateway config document (file merged with flag overrides)
 * into a `GatewayConfig`. Every field is checked with its path; cross-field
 * rules (unique ids, disaggregation shape, KV events for KV routing) run last.
 * The router knobs are validated by `resolveKvRouterConfig` from src/core: the
 * file uses Dynamo's snake_case names (`router_temperature`), and this module
 * only maps names and locates errors, it keeps no knob list of its own.
 */
import { availableParallelism } from 'node:os';
import { existsSync, readFileSync, statSync } from 'node:fs';
import { dirname, isAbsolute, join, resolve as resolvePath } from 'node:path';
import {
  KV_ROUTER_CONFIG_FIELDS, kvEventsEnabled, resolveKvRouterConfig,
  type KvRouterConfig, type KvRouterOptions,
} from '../core/config.js';
import { isKvgateError } from '../errors/index.js';
import type { EngineDialect, KvEventSource, WorkerRole } from '../discovery/index.js';
import { ConfigReader, closestKey, isPlainObject, show, type ConfigProblem, type FieldPath } from './reader.js';
import {
  LOG_LEVELS, ROUTER_MODES,
  type GatewayConfig, type ListenAddress, type LogLevel, type ModelConfig, type RouterMode, type TokenizerSource, type WorkerConfig,
} from './types.js';

/** Defaults in one place (the README's configuration reference quotes them). */
export const GATEWAY_DEFAULTS = Object.freeze({
  host: '127.0.0.1',
  port: 8080,
  adminHost: '127.0.0.1',
  maxBodyBytes: 4 * 1024 * 1024,
  maxPromptTokens: 131_072,
  maxConcurrentRequests: 1024,
  requestTimeoutMs: 600_000,
  retryAfterSeconds: 1,
  drainTimeoutMs: 30_000,
  segmentCacheTokens: 2_000_000,
  logLevel: 'info' as LogLevel,
  routerMode: 'kv' as RouterMode,
  blockSize: 16,
  engine: 'vllm' as EngineDialect,
  sglangBootstrapPort: 8998,
});

/** Preprocessing threads by default: one per spare core, at least 1, at most 4. */
export function defaultPreprocessThreads(): number {
  return Math.max(1, Math.min(4, availableParallelism() - 1));
}

/** Dynamo snake_case knob name -> KvRouterOptions field (from the core's table). */
const KNOB_BY_DYNAMO_NAME: ReadonlyMap<string, string> = new Map(
  Object.entries(KV_ROUTER_CONFIG_FIELDS).map(([field, spec]) => [spec.dynamo, field]),
);
const DYNAMO_NAME_BY_KNOB: ReadonlyMap<string, string> = new Map(
  Object.entries(KV_ROUTER_CONFIG_FIELDS).map(([field, spec]) => [field, spec.dynamo]),
);

const TOP_KEYS = ['listen', 'admin', 'auth', 'limits', 'shutdown', 'preprocess', 'log', 'router', 'models'] as const;
const MODEL_KEYS = ['name', 'router_mode', 'block_size', 'tokenizer', 'on_missing_tokenizer', 'engine', 'enforce_disagg',
  'max_prompt_tokens', 'router', 'workers'] as const;
const WORKER_KEYS = ['id', 'url', 'role', 'engine', 'dp_size', 'dp_start', 'kv_events', 'bootstrap_host', 'bootstrap_port',
  'max_num_batched_tokens', 'total_kv_blocks'] as const;
const ROLES: readonly WorkerRole[] = ['aggregated', 'decode', 'prefill'];
const ENGINES: readonly EngineDialect[] = ['vllm', 'sglang'];
const MAX_U53 = Number.MAX_SAFE_INTEGER;

/** Resolution context: where the document came from, for error sources and relative paths. */
export interface ResolveContext {
  /** Absolute path of the config file, if any (relative paths in it resolve against its folder). */
  file: string | undefined;
  /** Which input set a path: the flag name for overridden paths, else the file. */
  sourceOf(path: FieldPath): { source: string; position?: string | undefined };
  /** Environment for `auth.api_keys_env`. */
  env: Readonly<Record<string, string | undefined>>;
}

function checkHttpUrl(s: string): string | undefined {
  let u: URL;
  try {
    u = new URL(s);
  } catch {
    return 'must be an absolute http(s) URL';
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:') return 'must be an http:// or https:// URL';
  if (u.search !== '' || u.hash !== '') return 'must not have a query or fragment';
  if (u.username !== '' || u.password !== '') return 'must not embed credentials';
  return undefined;
}

function checkZmqEndpoint(s: string): string | undefined {
  const m = /^(tcp|ipc):\/\/(.+)$/.exec(s);
  if (m === null) return 'must be a ZMQ endpoint such as tcp://10.0.0.5:5557 (or ipc://path)';
  if (m[1] === 'tcp') {
    const hp = /^(\[[^\]]+\]|[^:]+):(\d{1,5})$/.exec(m[2]!);
    if (hp === null || Number(hp[2]) > 65535) return 'must be tcp://host:port';
    if (hp[1] === '*' || hp[1] === '0.0.0.0' || hp[1] === '[::]') {
      return 'is a bind address (the engine\'s side); give the engine\'s host, which kvgate connects to';
    }
  }
  return undefined;
}

function checkHost(s: string): string | undefined {
  return /^[A-Za-z0-9.:\-[\]]+$/.test(s) ? undefined : 'must be a host name or IP address';
}

function baseDir(ctx: ResolveContext): string {
  return ctx.file !== undefined ? dirname(ctx.file) : process.cwd();
}

function absolute(ctx: ResolveContext, p: string): string {
  return isAbsolute(p) ? p : resolvePath(baseDir(ctx), p);
}

function readListen(r: ConfigReader | undefined, host: string, port: number): ListenAddress {
  if (r === undefined) return { host, port };
  r.allowOnly(['host', 'port']);
  return { host: r.str('host', host, checkHost), port: r.int('port', port, { min: 0, max: 65535 }) };
}

function readApiKeys(root: ConfigReader, ctx: ResolveContext): string[] {
  const auth = root.child('auth');
  if (auth === undefined) return [];
  auth.allowOnly(['api_keys', 'api_keys_env', 'api_keys_file']);
  const keys: string[] = [];
  const list = auth.list('api_keys');
  list?.forEach((k, i) => {
    if (typeof k !== 'string' || k.length < 8 || /\s/.test(k)) {
      // Never echo a key back, even a bad one.
      auth.problemAt([...auth.path, 'api_keys', i], 'must be a string of at least 8 characters without spaces');
    } else keys.push(k);
  });
  const envName = auth.optStr('api_keys_env', (s) => (/^[A-Za-z_][A-Za-z0-9_]*$/.test(s) ? undefined : 'must be an environment variable name'));
  if (envName !== undefined) {
    const value = ctx.env[envName];
    if (value === undefined || value.trim() === '') auth.problem('api_keys_env', `environment variable ${envName} is not set or empty`);
    else keys.push(...value.split(',').map((k) => k.trim()).filter((k) => k.length > 0));
  }
  const file = auth.optStr('api_keys_file');
  if (file !== undefined) {
    const path = absolute(ctx, file);
    try {
      for (const line of readFileSync(path, 'utf8').split('\n')) {
        const k = line.trim();
        if (k !== '' && !k.startsWith('#')) keys.push(k);
      }
    } catch (err) {
      auth.problem('api_keys_file', `cannot read ${path}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
    }
  }
  if (auth.has('api_keys') || envName !== undefined || file !== undefined) {
    if (keys.length === 0) auth.problemAt(auth.path, 'names no API key; remove the auth section to serve without authentication');
  }
  return keys;
}

/** Validates the `router` knobs of one section (Dynamo names) and returns them as options. */
function readRouterKnobs(r: ConfigReader | undefined): { options: KvRouterOptions; origin: Map<string, FieldPath> } {
  const options: Record<string, unknown> = {};
  const origin = new Map<string, FieldPath>();
  if (r === undefined) return { options, origin };
  const known = [...KNOB_BY_DYNAMO_NAME.keys()];
  for (const [name, value] of Object.entries(r.node)) {
    const field = KNOB_BY_DYNAMO_NAME.get(name);
    if (field === undefined) {
      const hint = closestKey(name, known);
      r.problem(name, `unknown router knob${hint !== undefined ? ` (did you mean "${hint}"?)` : ''}`);
      continue;
    }
    // Check the value on its own first, so every bad knob is reported, not just the first.
    try {
      resolveKvRouterConfig({ [field]: value } as KvRouterOptions);
    } catch (err) {
      if (!isKvgateError(err, 'KVG_ERR_INVALID_CONFIG')) throw err;
      // Rules between knobs ("requires ...") are checked on the merged set below.
      const reason = String(err.detail?.reason ?? err.message);
      if (!/require/.test(reason)) {
        r.problem(name, reason);
        continue;
      }
    }
    options[field] = value;
    origin.set(field, [...r.path, name]);
  }
  return { options: options as KvRouterOptions, origin };
}

/** Resolves merged knobs (global then model) with the core's cross-field rules. */
function resolveRouter(root: ConfigReader, global: ReturnType<typeof readRouterKnobs>, local: ReturnType<typeof readRouterKnobs>,
  fallbackPath: FieldPath): KvRouterConfig {
  const merged = { ...global.options, ...local.options } as KvRouterOptions;
  try {
    return resolveKvRouterConfig(merged);
  } catch (err) {
    if (!isKvgateError(err, 'KVG_ERR_INVALID_CONFIG')) throw err;
    const field = String(err.detail?.field ?? '').replace(/\[.*$/, '');
    const path = local.origin.get(field) ?? global.origin.get(field) ?? fallbackPath;
    const name = DYNAMO_NAME_BY_KNOB.get(field);
    const reason = String(err.detail?.reason ?? err.message);
    // The core names camelCase fields inside its reasons; the file uses Dynamo's names.
    let text = reason;
    for (const [f, d] of DYNAMO_NAME_BY_KNOB) text = text.replaceAll(f, d);
    root.problemAt(path, name !== undefined && path === fallbackPath ? `${name}: ${text}` : text);
    // Keep the other knobs (so later rules such as "KV events need endpoints" judge what
    // the operator wrote); this config is never used, since a problem was recorded.
    const rest: Record<string, unknown> = { ...merged };
    delete rest[field];
    try {
      return resolveKvRouterConfig(rest as KvRouterOptions);
    } catch {
      return resolveKvRouterConfig({});
    }
  }
}

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
    return { kind: 'files', files: { tokenizerJson: json, tokenizerConfig: existsSync(cfg) ? cfg : undefined } };
  }
  if (!isPlainObject(v)) {
    m.problem('tokenizer', `must be "none", "demo", a path, or {json, config}; got ${show(v)}`);
    return { kind: 'none', onMissing };
  }
  const t = m.child('tokenizer')!;
  t.allowOnly(['json', 'config']);
  const json = t.reqStr('json');
  const config = t.optStr('config');
  return {
    kind: 'files',
    files: {
      tokenizerJson: json === '' ? '' : checkFile([...t.path, 'json'], json),
      tokenizerConfig: config === undefined ? undefined : checkFile([...t.path, 'config'], config),
    },
  };
}

function readKvEvents(w: ConfigReader): KvEventSource | undefined {
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
  const topic = typeof k.node.topic === 'string' ? k.node.topic : k.node.topic === undefined ? undefined : (k.problem('topic', `must be a string, got ${show(k.node.topic)}`), undefined);
  const dpPortStride = k.optInt('dp_port_stride', { min: 0, max: 1000 });
  return { endpoint, replayEndpoint, topic, dpPortStride };
}

function readWorker(w: ConfigReader, modelEngine: EngineDialect, modelName: string): WorkerConfig {
  w.allowOnly(WORKER_KEYS);
  const id = w.reqInt('id', { min: 0, max: MAX_U53 });
  const url = w.reqStr('url', checkHttpUrl).replace(/\/+$/, '');
  const role = w.oneOf('role', ROLES, 'aggregated');
  const dialect = w.oneOf('engine', ENGINES, modelEngine);
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
    w.problem(w.has('bootstrap_host') ? 'bootstrap_host' : 'bootstrap_port',
      'only SGLang prefill workers have a bootstrap server (role: prefill, engine: sglang)');
  }
  return {
    id, model: modelName, url, role, dialect, dpStart, dpSize, kvEvents, bootstrap,
    maxNumBatchedTokens: w.optInt('max_num_batched_tokens', { min: 1 }),
    totalKvBlocks: w.optInt('total_kv_blocks', { min: 1 }),
  };
}

function readModel(m: ConfigReader, ctx: ResolveContext, globalRouter: ReturnType<typeof readRouterKnobs>,
  maxPromptTokens: number, root: ConfigReader): ModelConfig {
  m.allowOnly(MODEL_KEYS);
  const name = m.reqStr('name', (s) => (s.length <= 256 && !/[\s]/.test(s) ? undefined : 'must be at most 256 characters without whitespace'));
  const routerMode = m.oneOf('router_mode', ROUTER_MODES, GATEWAY_DEFAULTS.routerMode);
  const blockSize = m.int('block_size', GATEWAY_DEFAULTS.blockSize, { min: 1, max: 1 << 20 });
  const tokenizer = readTokenizer(m, ctx);
  const engine = m.oneOf('engine', ENGINES, GATEWAY_DEFAULTS.engine);
  const enforceDisagg = m.bool('enforce_disagg', false);
  const modelMax = m.int('max_prompt_tokens', maxPromptTokens, { min: 1 });
  const localRouter = readRouterKnobs(m.child('router'));
  const router = resolveRouter(root, globalRouter, localRouter, [...m.path, 'router']);
  const workers: WorkerConfig[] = [];
  const list = m.list('workers');
  if (list === undefined || list.length === 0) m.problem('workers', 'must list at least one worker');
  list?.forEach((node, i) => {
    const path = [...m.path, 'workers', i];
    if (!isPlainObject(node)) {
      m.problemAt(path, `must be an object with id and url, got ${show(node)}`);
      // A placeholder keeps workers[i] aligned with the file for later paths; the
      // problem above means this config is never used.
      workers.push({ id: Number.NaN, model: name, url: '', role: 'aggregated', dialect: engine, dpStart: 0, dpSize: 1 });
      return;
    }
    workers.push(readWorker(m.at(path, node), engine, name));
  });
  return { name, routerMode, blockSize, tokenizer, enforceDisagg, maxPromptTokens: modelMax, router, workers };
}

/** Cross-field rules of one model; `workerPaths[i]` is the path of `workers[i]`. */
function checkModel(model: ModelConfig, m: ConfigReader, warnings: string[]): void {
  const roles = new Set(model.workers.map((w) => w.role));
  const prefill = model.workers.filter((w) => w.role === 'prefill');
  if (roles.has('aggregated') && (roles.has('prefill') || roles.has('decode'))) {
    m.problem('workers', 'mixes aggregated workers with prefill/decode workers; a model is either aggregated or disaggregated (prefill + decode)');
  } else if (roles.has('decode') && !roles.has('prefill')) {
    m.problem('workers', 'has decode workers but no prefill worker');
  } else if (roles.has('prefill') && !roles.has('decode')) {
    m.problem('workers', 'has prefill workers but no decode worker');
  }
  else if (prefill.length > 0 && new Set(model.workers.map((w) => w.dialect)).size > 1) {
    m.problem('workers', 'mixes vllm and sglang workers; prefill and decode must speak the same disaggregation protocol');
  }
  if (model.enforceDisagg && prefill.length === 0) m.problem('enforce_disagg', 'requires at least one prefill worker');
  if (model.routerMode === 'kv' && kvEventsEnabled(model.router)) {
    const raw = Array.isArray(m.node.workers) ? (m.node.workers as unknown[]) : [];
    model.workers.forEach((w, i) => {
      // Absent, not merely invalid (an invalid endpoint is already reported).
      if (w.kvEvents === undefined && isPlainObject(raw[i]) && raw[i].kv_events === undefined) {
        m.problemAt([...m.path, 'workers', i, 'kv_events'],
          'is required in router_mode kv with KV events on; set it, or set router.use_kv_events: false (approximate mode)');
      }
    });
    if (model.tokenizer.kind === 'none' && model.tokenizer.onMissing === 'approximate') {
      warnings.push(`model ${model.name}: no tokenizer; prefix hashes come from the byte-packing fallback tokenizer and match `
        + 'the engines\' KV events only if the engines tokenize the same way (kvgate mockers do, real engines do not)');
    }
  }
  if (model.routerMode !== 'kv' && model.workers.some((w) => w.kvEvents !== undefined)) {
    warnings.push(`model ${model.name}: router_mode ${model.routerMode} does not use KV events; kv_events endpoints are ignored`);
  }
}

export interface ResolveResult {
  config: GatewayConfig;
  problems: ConfigProblem[];
}

/** Validates a parsed document. Never throws for bad input: problems are returned (with a placeholder config). */
export function resolveGatewayConfig(doc: unknown, ctx: ResolveContext): ResolveResult {
  const problems: ConfigProblem[] = [];
  const warnings: string[] = [];
  if (!isPlainObject(doc)) {
    const { source, position } = ctx.sourceOf([]);
    problems.push({ path: '(root)', reason: `must be a mapping of sections (listen, models, ...), got ${show(doc)}`, source, position });
    doc = {};
  }
  const root = new ConfigReader(doc as Record<string, unknown>, [], problems, ctx.sourceOf);
  root.allowOnly(TOP_KEYS);

  const listen = readListen(root.child('listen'), GATEWAY_DEFAULTS.host, GATEWAY_DEFAULTS.port);
  const adminR = root.child('admin');
  adminR?.allowOnly(['enabled', 'host', 'port']);
  const adminEnabled = adminR?.bool('enabled', false) ?? false;
  let adminListen: ListenAddress | undefined;
  if (adminR?.has('port') === true) {
    adminListen = { host: adminR.str('host', GATEWAY_DEFAULTS.adminHost, checkHost), port: adminR.int('port', 0, { min: 0, max: 65535 }) };
    if (!adminEnabled) adminR.problem('port', 'is set but admin.enabled is false');
  } else if (adminR?.has('host') === true) {
    adminR.problem('host', 'needs admin.port (a separate admin listener)');
  }
  if (adminListen !== undefined && adminListen.port !== 0 && adminListen.port === listen.port && adminListen.host === listen.host) {
    adminR?.problem('port', 'is the public listener\'s address; omit admin.port to serve admin endpoints on the public listener');
  }

  const apiKeys = readApiKeys(root, ctx);

  const lim = root.child('limits');
  lim?.allowOnly(['max_body_bytes', 'max_prompt_tokens', 'max_concurrent_requests', 'request_timeout_ms', 'retry_after_seconds']);
  const limits = {
    maxBodyBytes: lim?.int('max_body_bytes', GATEWAY_DEFAULTS.maxBodyBytes, { min: 1024, max: 1 << 30 }) ?? GATEWAY_DEFAULTS.maxBodyBytes,
    maxPromptTokens: lim?.int('max_prompt_tokens', GATEWAY_DEFAULTS.maxPromptTokens, { min: 1, max: 1 << 26 }) ?? GATEWAY_DEFAULTS.maxPromptTokens,
    maxConcurrentRequests: lim?.int('max_concurrent_requests', GATEWAY_DEFAULTS.maxConcurrentRequests, { min: 1, max: 1 << 20 }) ?? GATEWAY_DEFAULTS.maxConcurrentRequests,
    requestTimeoutMs: lim?.int('request_timeout_ms', GATEWAY_DEFAULTS.requestTimeoutMs, { min: 1, max: 86_400_000 }) ?? GATEWAY_DEFAULTS.requestTimeoutMs,
    retryAfterSeconds: lim?.int('retry_after_seconds', GATEWAY_DEFAULTS.retryAfterSeconds, { min: 0, max: 3600 }) ?? GATEWAY_DEFAULTS.retryAfterSeconds,
  };

  const sh = root.child('shutdown');
  sh?.allowOnly(['drain_timeout_ms']);
  const drainTimeoutMs = sh?.int('drain_timeout_ms', GATEWAY_DEFAULTS.drainTimeoutMs, { min: 0, max: 3_600_000 }) ?? GATEWAY_DEFAULTS.drainTimeoutMs;

  const pre = root.child('preprocess');
  pre?.allowOnly(['threads', 'segment_cache_tokens']);
  const preprocess = {
    threads: pre?.int('threads', defaultPreprocessThreads(), { min: 0, max: 64 }) ?? defaultPreprocessThreads(),
    segmentCacheTokens: pre?.int('segment_cache_tokens', GATEWAY_DEFAULTS.segmentCacheTokens, { min: 0, max: 1 << 28 }) ?? GATEWAY_DEFAULTS.segmentCacheTokens,
  };

  const log = root.child('log');
  log?.allowOnly(['level']);
  const logLevel = log?.oneOf('level', LOG_LEVELS, GATEWAY_DEFAULTS.logLevel) ?? GATEWAY_DEFAULTS.logLevel;

  const globalRouter = readRouterKnobs(root.child('router'));
  const models: ModelConfig[] = [];
  const modelReaders: ConfigReader[] = [];
  root.list('models')?.forEach((node, i) => {
    if (!isPlainObject(node)) {
      root.problemAt(['models', i], `must be an object with name and workers, got ${show(node)}`);
      return;
    }
    const r = root.at(['models', i], node);
    models.push(readModel(r, ctx, globalRouter, limits.maxPromptTokens, root));
    modelReaders.push(r);
  });
  if (models.length === 0) resolveRouter(root, globalRouter, readRouterKnobs(undefined), ['router']);

  // Cross-field rules last.
  const byName = new Map<string, number>();
  const byId = new Map<number, string>();
  models.forEach((model, i) => {
    const r = modelReaders[i]!;
    if (model.name !== '' && byName.has(model.name)) r.problem('name', `duplicates models[${byName.get(model.name)}].name`);
    byName.set(model.name, i);
    model.workers.forEach((w, j) => {
      if (Number.isNaN(w.id)) return;
      const here = `models[${i}].workers[${j}]`;
      const seen = byId.get(w.id);
      if (seen !== undefined) r.problemAt([...r.path, 'workers', j, 'id'], `${w.id} is already the id of ${seen}; worker ids are unique across the gateway`);
      else byId.set(w.id, here);
    });
    checkModel(model, r, warnings);
  });

  const config: GatewayConfig = {
    file: ctx.file, listen, admin: { enabled: adminEnabled, listen: adminListen }, apiKeys, limits, drainTimeoutMs,
    preprocess, logLevel, models, warnings,
  };
  return { config: deepFreeze(config), problems };
}

function deepFreeze<T>(value: T): T {
  if (typeof value === 'object' && value !== null && !Object.isFrozen(value)) {
    for (const v of Object.values(value)) deepFreeze(v);
    Object.freeze(value);
  }
  return value;
}
