/**
 * The `tenants` section: the tenant classes (queue priority and weight, per-tenant rate limits), the declared
 * tenants (their class and the API keys that name them) and the header that may name a tenant instead. Absent,
 * every request belongs to the tenant `other` of one unlimited class `default`: kvgate behaves as without tenants.
 */
import { DEFAULT_MAX_PRIORITY_JUMP, MAX_PRIORITY_JUMP_LIMIT } from '../core/index.js';
import { show, type ConfigReader } from './reader.js';
import { TOKEN } from './resolve-edge.js';
import type { EnginePriorityRange, TenantClassConfig, TenantConfig, TenantsConfig } from './types.js';

/** The tenant every request without a declared tenant belongs to (and its metric label). */
export const OTHER_TENANT = 'other';

/** The class of the section's absence. */
const DEFAULT_CLASS: TenantClassConfig = {
  name: 'default',
  priority: 0,
  weight: 1,
  requestRate: undefined,
  requestBurst: 1,
  tokenRate: undefined,
  tokenBurst: 1,
  enginePriority: undefined,
  // The router's own default bound too (core's queue.ts says why 10 s).
  maxPriorityJump: DEFAULT_MAX_PRIORITY_JUMP,
};

const NO_TENANTS: TenantsConfig = {
  header: undefined,
  defaultClass: DEFAULT_CLASS.name,
  queueLimitPerWorker: undefined,
  classes: [DEFAULT_CLASS],
  members: [],
};

const NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;
const nameRule = (s: string): string | undefined =>
  NAME.test(s) ? undefined : 'must be 1 to 64 letters, digits, ".", "_" or "-", starting with a letter or digit';

function readClass(r: ConfigReader): TenantClassConfig {
  r.allowOnly([
    'name',
    'priority',
    'weight',
    'request_rate',
    'request_burst',
    'token_rate',
    'token_burst',
    'engine_priority',
    'max_priority_jump',
  ]);
  const requestRate = r.has('request_rate') ? r.num('request_rate', 1, { min: 0, exclusiveMin: true }) : undefined;
  const tokenRate = r.has('token_rate') ? r.num('token_rate', 1, { min: 0, exclusiveMin: true }) : undefined;
  // A bucket holds at least one second of its rate (and one request): a smaller one would refuse at the rate itself.
  const requestBurst = r.int('request_burst', Math.max(1, Math.ceil(requestRate ?? 1)), { min: 1 });
  const tokenBurst = r.int('token_burst', Math.max(1, Math.ceil(tokenRate ?? 1)), { min: 1 });
  if (requestRate === undefined && r.has('request_burst')) r.problem('request_burst', 'needs request_rate');
  if (tokenRate === undefined && r.has('token_burst')) r.problem('token_burst', 'needs token_rate');
  return {
    name: r.reqStr('name', nameRule),
    priority: r.int('priority', 0, { min: 0, max: 100 }),
    weight: r.int('weight', 1, { min: 1, max: 1000 }),
    requestRate,
    requestBurst,
    tokenRate,
    tokenBurst,
    enginePriority: readEnginePriority(r),
    maxPriorityJump: r.num('max_priority_jump', DEFAULT_MAX_PRIORITY_JUMP, { min: 0, max: MAX_PRIORITY_JUMP_LIMIT }),
  };
}

/**
 * A class's `engine_priority: {min, max}` (integers, either left out for no bound on that side; `{}` forwards any
 * value); absent, the class's clients may not set the engine `priority`.
 */
function readEnginePriority(r: ConfigReader): EnginePriorityRange | undefined {
  const e = r.child('engine_priority');
  if (e === undefined) return undefined;
  e.allowOnly(['min', 'max']);
  const bound = { min: -Number.MAX_SAFE_INTEGER, max: Number.MAX_SAFE_INTEGER };
  const min = e.int('min', bound.min, bound);
  const max = e.int('max', bound.max, bound);
  if (min > max) e.problem('max', `must be at least min (${min}), got ${max}`);
  return { min, max };
}

function readMember(r: ConfigReader, classes: ReadonlySet<string>, apiKeys: ReadonlySet<string>): TenantConfig {
  r.allowOnly(['name', 'class', 'api_keys']);
  const name = r.reqStr(
    'name',
    (s) => nameRule(s) ?? (s === OTHER_TENANT ? `"${OTHER_TENANT}" is reserved` : undefined),
  );
  const cls = r.reqStr('class', (s) => (classes.has(s) ? undefined : `must name one of tenants.classes`));
  const keys: string[] = [];
  (r.list('api_keys') ?? []).forEach((k, i) => {
    // The key itself is never echoed back: a typo'd secret in an error line is still a secret.
    if (typeof k !== 'string' || !apiKeys.has(k))
      r.problemAt([...r.path, 'api_keys', i], 'must be one of the keys auth accepts (auth.api_keys, _env or _file)');
    else keys.push(k);
  });
  return { name, class: cls, apiKeys: keys };
}

function readList<T>(r: ConfigReader, key: string, read: (item: ConfigReader) => T): T[] {
  const out: T[] = [];
  (r.list(key) ?? []).forEach((item, i) => {
    if (item === null || typeof item !== 'object' || Array.isArray(item))
      r.problemAt([...r.path, key, i], `must be a mapping, got ${show(item)}`);
    else out.push(read(r.at([...r.path, key, i], item as Record<string, unknown>)));
  });
  return out;
}

function checkUnique(r: ConfigReader, key: string, names: readonly string[]): void {
  names.forEach((n, i) => {
    if (names.indexOf(n) !== i) r.problemAt([...r.path, key, i, 'name'], `repeats the name ${show(n)}`);
  });
}

/** The `tenants` section, checked against the accepted API keys. */
export function readTenants(root: ConfigReader, apiKeys: readonly string[]): TenantsConfig {
  const r = root.child('tenants');
  if (r === undefined) return NO_TENANTS;
  r.allowOnly(['header', 'default_class', 'queue_limit_per_worker', 'classes', 'members']);
  const classes = readList(r, 'classes', readClass);
  if (classes.length === 0 && r.list('classes') !== undefined) r.problem('classes', 'must declare at least one class');
  if (classes.length === 0) classes.push(DEFAULT_CLASS);
  checkUnique(
    r,
    'classes',
    classes.map((c) => c.name),
  );
  const classNames = new Set(classes.map((c) => c.name));
  const defaultClass = r.str('default_class', classes[0]!.name, (s) =>
    classNames.has(s) ? undefined : 'must name one of tenants.classes',
  );
  const keySet = new Set(apiKeys);
  const members = readList(r, 'members', (m) => readMember(m, classNames, keySet));
  checkUnique(
    r,
    'members',
    members.map((m) => m.name),
  );
  const owner = new Map<string, string>();
  members.forEach((m, i) => {
    for (const k of m.apiKeys) {
      const first = owner.get(k);
      if (first !== undefined) r.problemAt([...r.path, 'members', i, 'api_keys'], `shares a key with tenant ${first}`);
      else owner.set(k, m.name);
    }
  });
  const header = r.optStr('header', (s) => (TOKEN.test(s) ? undefined : 'must be an HTTP header name'));
  const queueLimitPerWorker = r.optInt('queue_limit_per_worker', { min: 1 });
  return { header: header?.toLowerCase(), defaultClass, queueLimitPerWorker, classes, members };
}
