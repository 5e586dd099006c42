/**
 * Validation of the gateway config document (file merged with flag overrides)
 * into a `GatewayConfig`. Every field is checked with its path; cross-field
 * rules (unique ids, disaggregation shape, KV events for KV routing) run last.
 * The router knobs are validated by `resolveKvRouterConfig` from src/core: the
 * file uses Dynamo's snake_case names (`router_temperature`), and this module
 * only maps names and locates errors, it keeps no knob list of its own.
 */
import { readFileSync } from 'node:fs';
import { absolute, checkHost, type ResolveContext } from './checks.js';
import { GATEWAY_DEFAULTS } from './defaults.js';
import { ConfigReader, isPlainObject, show, type ConfigProblem } from './reader.js';
import { checkModel, readEngineTimeouts, readModel } from './resolve-model.js';
import { adminExposure, readLimits, readListen } from './resolve-edge.js';
import { readKvEventBounds } from './resolve-kv-events.js';
import { readPreprocess } from './resolve-preprocess.js';
import { readReplicas } from './resolve-replicas.js';
import { readRouterKnobs, resolveRouter } from './resolve-router.js';
import { readTenants } from './resolve-tenants.js';
import { LOG_LEVELS, type GatewayConfig, type ListenAddress, type ModelConfig } from './types.js';

const TOP_KEYS = [
  'listen',
  'admin',
  'auth',
  'limits',
  'health',
  'tracing',
  'shutdown',
  'preprocess',
  'log',
  'router',
  'engine_timeouts',
  'engine_connections',
  'kv_events',
  'models',
  'replicas',
  'tenants',
  'processes',
  'pid_file',
] as const;

/** One rule for a key from any source: at least 8 characters, no spaces. */
const KEY_RULE = 'at least 8 characters without spaces';
const weakKey = (k: string): boolean => k.length < 8 || /\s/.test(k);

function readApiKeys(root: ConfigReader, ctx: ResolveContext): string[] {
  const auth = root.child('auth');
  if (auth === undefined) return [];
  auth.allowOnly(['api_keys', 'api_keys_env', 'api_keys_file']);
  const keys: string[] = [];
  const list = auth.list('api_keys');
  list?.forEach((k, i) => {
    if (typeof k !== 'string' || weakKey(k)) {
      // Never echo a key back, even a bad one.
      auth.problemAt([...auth.path, 'api_keys', i], `must be a string of ${KEY_RULE}`);
    } else keys.push(k);
  });
  const envName = auth.optStr('api_keys_env', (s) =>
    /^[A-Za-z_][A-Za-z0-9_]*$/.test(s) ? undefined : 'must be an environment variable name',
  );
  if (envName !== undefined) {
    const value = ctx.env[envName];
    if (value === undefined || value.trim() === '')
      auth.problem('api_keys_env', `environment variable ${envName} is not set or empty`);
    else
      value
        .split(',')
        .map((k) => k.trim())
        .filter((k) => k.length > 0)
        .forEach((k, i) => {
          if (weakKey(k)) auth.problem('api_keys_env', `key ${i + 1} of ${envName} must be ${KEY_RULE}`);
          else keys.push(k);
        });
  }
  const file = auth.optStr('api_keys_file');
  if (file !== undefined) {
    const path = absolute(ctx, file);
    try {
      readFileSync(path, 'utf8')
        .split('\n')
        .forEach((line, i) => {
          const k = line.trim();
          if (k === '' || k.startsWith('#')) return;
          if (weakKey(k)) auth.problem('api_keys_file', `line ${i + 1} of ${path}: the key must be ${KEY_RULE}`);
          else keys.push(k);
        });
    } catch (err) {
      auth.problem(
        'api_keys_file',
        `cannot read ${path}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`,
      );
    }
  }
  if (auth.has('api_keys') || envName !== undefined || file !== undefined) {
    if (keys.length === 0)
      auth.problemAt(auth.path, 'names no API key; remove the auth section to serve without authentication');
  }
  return keys;
}

export interface ResolveResult {
  config: GatewayConfig;
  problems: ConfigProblem[];
}

function readAdmin(root: ConfigReader, listen: ListenAddress): GatewayConfig['admin'] {
  const adminR = root.child('admin');
  adminR?.allowOnly(['enabled', 'host', 'port']);
  const enabled = adminR?.bool('enabled', false) ?? false;
  let adminListen: ListenAddress | undefined;
  if (adminR?.has('port') === true) {
    adminListen = {
      host: adminR.str('host', GATEWAY_DEFAULTS.adminHost, checkHost),
      port: adminR.int('port', 0, { min: 0, max: 65535 }),
    };
    if (!enabled) adminR.problem('port', 'is set but admin.enabled is false');
  } else if (adminR?.has('host') === true) {
    adminR.problem('host', 'needs admin.port (a separate admin listener)');
  }
  if (
    adminListen !== undefined &&
    adminListen.port !== 0 &&
    adminListen.port === listen.port &&
    adminListen.host === listen.host
  ) {
    adminR?.problem(
      'port',
      "is the public listener's address; omit admin.port to serve admin endpoints on the public listener",
    );
  }
  return { enabled, listen: adminListen };
}

function readHealth(root: ConfigReader): GatewayConfig['health'] {
  const h = root.child('health');
  h?.allowOnly(['interval_ms', 'timeout_ms', 'unhealthy_after', 'max_ejected_percent', 'outlier_detection']);
  const D = GATEWAY_DEFAULTS;
  const o = h?.child('outlier_detection');
  o?.allowOnly(['consecutive_errors', 'base_ejection_ms', 'max_ejection_ms']);
  const baseEjectionMs =
    o?.int('base_ejection_ms', D.outlierBaseEjectionMs, { min: 1, max: 86_400_000 }) ?? D.outlierBaseEjectionMs;
  return {
    outlierDetection: {
      consecutiveErrors:
        o?.int('consecutive_errors', D.outlierConsecutiveErrors, { min: 0, max: 1_000_000 }) ??
        D.outlierConsecutiveErrors,
      baseEjectionMs,
      maxEjectionMs:
        o?.int('max_ejection_ms', Math.max(D.outlierMaxEjectionMs, baseEjectionMs), {
          min: baseEjectionMs,
          max: 86_400_000,
        }) ?? Math.max(D.outlierMaxEjectionMs, baseEjectionMs),
    },
    intervalMs: h?.int('interval_ms', D.healthIntervalMs, { min: 10, max: 3_600_000 }) ?? D.healthIntervalMs,
    timeoutMs: h?.int('timeout_ms', D.healthTimeoutMs, { min: 10, max: 600_000 }) ?? D.healthTimeoutMs,
    unhealthyAfter: h?.int('unhealthy_after', D.healthUnhealthyAfter, { min: 1, max: 1000 }) ?? D.healthUnhealthyAfter,
    maxEjectedPercent:
      h?.int('max_ejected_percent', D.healthMaxEjectedPercent, { min: 0, max: 100 }) ?? D.healthMaxEjectedPercent,
  };
}

function readTracing(root: ConfigReader): GatewayConfig['tracing'] {
  const t = root.child('tracing');
  t?.allowOnly(['otlp_endpoint', 'sample_ratio', 'export_timeout_ms']);
  const otlpEndpoint = t?.optStr('otlp_endpoint', (s) => {
    try {
      return /^https?:$/.test(new URL(s).protocol) ? undefined : 'must be an http(s) URL';
    } catch {
      return 'must be an http(s) URL, e.g. http://otel-collector:4318';
    }
  });
  return {
    otlpEndpoint,
    sampleRatio:
      t?.num('sample_ratio', GATEWAY_DEFAULTS.tracingSampleRatio, { min: 0, max: 1 }) ??
      GATEWAY_DEFAULTS.tracingSampleRatio,
    exportTimeoutMs:
      t?.int('export_timeout_ms', GATEWAY_DEFAULTS.tracingExportTimeoutMs, { min: 100, max: 600_000 }) ??
      GATEWAY_DEFAULTS.tracingExportTimeoutMs,
  };
}

/** `engine_connections`: the connections to each worker's engine (read once, as each worker's engine pool opens). */
function readEngineConnections(root: ConfigReader): GatewayConfig['engineConnections'] {
  const e = root.child('engine_connections');
  e?.allowOnly(['max_per_worker']);
  const D = GATEWAY_DEFAULTS.engineMaxConnectionsPerWorker;
  return { maxPerWorker: e?.int('max_per_worker', D, { min: 1, max: 65_536 }) ?? D };
}

/** The process sections: shutdown, preprocessing threads, log level. */
function readProcess(
  root: ConfigReader,
): Pick<GatewayConfig, 'drainTimeoutMs' | 'preprocess' | 'logLevel' | 'processes'> {
  const sh = root.child('shutdown');
  sh?.allowOnly(['drain_timeout_ms']);
  const drainTimeoutMs =
    sh?.int('drain_timeout_ms', GATEWAY_DEFAULTS.drainTimeoutMs, { min: 0, max: 3_600_000 }) ??
    GATEWAY_DEFAULTS.drainTimeoutMs;

  const processes = root.int('processes', 1, { min: 1, max: 64 });
  const preprocess = readPreprocess(root, processes);

  const log = root.child('log');
  log?.allowOnly(['level']);
  const logLevel = log?.oneOf('level', LOG_LEVELS, GATEWAY_DEFAULTS.logLevel) ?? GATEWAY_DEFAULTS.logLevel;
  return { drainTimeoutMs, preprocess, logLevel, processes };
}

/** Every model, then the rules across them (unique names, worker ids unique gateway-wide) and within each. */
function readModels(
  root: ConfigReader,
  ctx: ResolveContext,
  maxPromptTokens: number,
  warnings: string[],
): ModelConfig[] {
  const globalRouter = readRouterKnobs(root.child('router'));
  const timeouts = readEngineTimeouts(root.child('engine_timeouts'), {
    firstByteMs: GATEWAY_DEFAULTS.engineFirstByteTimeoutMs,
    streamIdleMs: GATEWAY_DEFAULTS.engineStreamIdleTimeoutMs,
  });
  const models: ModelConfig[] = [];
  const modelReaders: ConfigReader[] = [];
  root.list('models')?.forEach((node, i) => {
    if (!isPlainObject(node)) {
      root.problemAt(['models', i], `must be an object with name and workers, got ${show(node)}`);
      return;
    }
    const r = root.at(['models', i], node);
    models.push(readModel(r, ctx, globalRouter, maxPromptTokens, root, timeouts));
    modelReaders.push(r);
  });
  if (models.length === 0) resolveRouter(root, globalRouter, readRouterKnobs(undefined), ['router']);
  // The embedded demo is for `kvgate serve` with nothing configured; a config file that lists no model
  // is a mistake (an emptied list, a misspelt key), not a request for simulated engines.
  const raw = root.node.models;
  if (ctx.file !== undefined && (raw === undefined || raw === null || (Array.isArray(raw) && raw.length === 0))) {
    root.problem(
      'models',
      'must list at least one model (the embedded demo starts only when kvgate serve is given no config file and no --model)',
    );
  }

  // Cross-field rules last.
  const byName = new Map<string, number>();
  const byId = new Map<number, string>();
  models.forEach((model, i) => {
    const r = modelReaders[i]!;
    if (model.name !== '' && byName.has(model.name))
      r.problem('name', `duplicates models[${byName.get(model.name)}].name`);
    byName.set(model.name, i);
    model.loraAdapters.forEach((a, j) => {
      // A client's `model` must name one thing: a model or one model's adapter.
      const other = models.findIndex((o, k) => k !== i && (o.name === a || (k < i && o.loraAdapters.includes(a))));
      if (other >= 0)
        r.problemAt(
          [...r.path, 'lora_adapters', j],
          `${a} is already the name of models[${other}] or one of its adapters`,
        );
    });
    model.workers.forEach((w, j) => {
      if (Number.isNaN(w.id)) return;
      const here = `models[${i}].workers[${j}]`;
      const seen = byId.get(w.id);
      if (seen !== undefined)
        r.problemAt(
          [...r.path, 'workers', j, 'id'],
          `${w.id} is already the id of ${seen}; worker ids are unique across the gateway`,
        );
      else byId.set(w.id, here);
    });
    checkModel(model, r, warnings);
  });
  return models;
}

/** Validates a parsed document. Never throws for bad input: problems are returned (with a placeholder config). */
export function resolveGatewayConfig(doc: unknown, ctx: ResolveContext): ResolveResult {
  const problems: ConfigProblem[] = [];
  const warnings: string[] = [];
  if (!isPlainObject(doc)) {
    const { source, position } = ctx.sourceOf([]);
    problems.push({
      path: '(root)',
      reason: `must be a mapping of sections (listen, models, ...), got ${show(doc)}`,
      source,
      position,
    });
    doc = {};
  }
  const root = new ConfigReader(doc as Record<string, unknown>, [], problems, ctx.sourceOf);
  root.allowOnly(TOP_KEYS);
  // Sections are read in document order of concern, so problems are listed the same way every time.
  const { listen, listenBacklog } = readListen(root.child('listen'), warnings);
  const admin = readAdmin(root, listen);
  const apiKeys = readApiKeys(root, ctx);
  const exposed = adminExposure(admin, listen, apiKeys);
  if (exposed !== undefined) warnings.push(exposed);
  const limits = readLimits(root);
  const tenants = readTenants(root, apiKeys);
  const health = readHealth(root);
  const tracing = readTracing(root);
  const engineConnections = readEngineConnections(root);
  const { drainTimeoutMs, preprocess, logLevel, processes } = readProcess(root);
  const pidFile = root.optStr('pid_file');
  const { kvEvents, kvIngestThreads } = readKvEventBounds(root);
  const models = readModels(root, ctx, limits.maxPromptTokens, warnings);
  const replicas = readReplicas(root);
  const config: GatewayConfig = {
    file: ctx.file,
    listen,
    listenBacklog,
    admin,
    apiKeys,
    limits,
    tenants,
    health,
    engineConnections,
    tracing,
    drainTimeoutMs,
    preprocess,
    logLevel,
    processes,
    pidFile: pidFile === undefined ? undefined : absolute(ctx, pidFile),
    kvEvents,
    kvIngestThreads,
    replicas,
    models,
    warnings,
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
