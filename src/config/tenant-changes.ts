/**
 * What a reload changes in the `tenants` section, field by field and tenant by tenant, for the reload's log
 * line: a class or tenant that comes or goes, each field of one that stays, and API keys counted (how many
 * were added and removed), never shown.
 */
import type { TenantClassConfig, TenantConfig, TenantsConfig } from './types.js';

/** One applied change (as `ConfigChange`). */
export interface TenantChange {
  readonly path: string;
  readonly from?: unknown;
  readonly to?: unknown;
}

const same = (a: unknown, b: unknown): boolean => JSON.stringify(a) === JSON.stringify(b);

const CLASS_FIELDS: readonly [string, keyof TenantClassConfig][] = [
  ['priority', 'priority'],
  ['weight', 'weight'],
  ['request_rate', 'requestRate'],
  ['request_burst', 'requestBurst'],
  ['token_rate', 'tokenRate'],
  ['token_burst', 'tokenBurst'],
  ['engine_priority', 'enginePriority'],
  ['max_priority_jump', 'maxPriorityJump'],
];

/** A field's value for the log line: `unset` for none, a range as `{"min":0,"max":10}`. */
const shown = (v: unknown): unknown =>
  v === undefined ? 'unset' : typeof v === 'object' && v !== null ? JSON.stringify(v) : v;

/** A class in one line. */
const classLine = (c: TenantClassConfig): string =>
  CLASS_FIELDS.map(([name, key]) => `${name} ${String(shown(c[key]))}`).join(', ');

/** A tenant in one line, its keys counted. */
const memberLine = (m: TenantConfig): string => `class ${m.class}, ${m.apiKeys.length} key(s)`;

/**
 * A list of API keys changing, without the keys: `from` and `to` are counts, `to` also says how many were
 * added and removed (so replacing one key with another does not read as "1 key(s)" to "1 key(s)").
 */
export function keysChange(path: string, prev: readonly string[], next: readonly string[]): TenantChange | undefined {
  if (same(prev, next)) return undefined;
  const added = next.filter((k) => !prev.includes(k)).length;
  const removed = prev.filter((k) => !next.includes(k)).length;
  const how = added === 0 && removed === 0 ? 'reordered' : `${added} added, ${removed} removed`;
  return { path, from: `${prev.length} key(s)`, to: `${next.length} key(s) (${how})` };
}

/** Entries of two lists by name: gone, come, and kept (before, after). */
function byName<T extends { readonly name: string }>(
  prev: readonly T[],
  next: readonly T[],
): { gone: T[]; come: T[]; kept: [T, T][] } {
  const after = new Map(next.map((x) => [x.name, x]));
  const before = new Set(prev.map((x) => x.name));
  return {
    gone: prev.filter((x) => !after.has(x.name)),
    come: next.filter((x) => !before.has(x.name)),
    kept: prev.filter((x) => after.has(x.name)).map((x): [T, T] => [x, after.get(x.name)!]),
  };
}

/** Every change from `prev` to `next`, in file order: the section's own fields, then classes, then tenants. */
export function tenantChanges(prev: TenantsConfig, next: TenantsConfig): TenantChange[] {
  const out: TenantChange[] = [];
  const note = (path: string, from: unknown, to: unknown): void => {
    if (!same(from, to)) out.push({ path, from: shown(from), to: shown(to) });
  };
  note('tenants.header', prev.header, next.header);
  note('tenants.default_class', prev.defaultClass, next.defaultClass);
  note('tenants.queue_limit_per_worker', prev.queueLimitPerWorker, next.queueLimitPerWorker);
  const classes = byName(prev.classes, next.classes);
  for (const c of classes.gone) out.push({ path: `tenants.classes[${c.name}]`, from: classLine(c) });
  for (const c of classes.come) out.push({ path: `tenants.classes[${c.name}]`, to: classLine(c) });
  for (const [b, a] of classes.kept)
    for (const [name, key] of CLASS_FIELDS) note(`tenants.classes[${a.name}].${name}`, b[key], a[key]);
  const members = byName(prev.members, next.members);
  for (const m of members.gone) out.push({ path: `tenants.members[${m.name}]`, from: memberLine(m) });
  for (const m of members.come) out.push({ path: `tenants.members[${m.name}]`, to: memberLine(m) });
  for (const [b, a] of members.kept) {
    note(`tenants.members[${a.name}].class`, b.class, a.class);
    const keys = keysChange(`tenants.members[${a.name}].api_keys`, b.apiKeys, a.apiKeys);
    if (keys !== undefined) out.push(keys);
  }
  // Only the order of classes or tenants changed: nothing a request sees, but the file did change.
  if (out.length === 0 && !same(prev, next)) out.push({ path: 'tenants', from: 'as before', to: 'reordered' });
  return out;
}
