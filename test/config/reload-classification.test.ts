/**
 * Every field of the resolved config is classified for a reload: a change to it is either refused as needing a
 * restart (`reloadProblems`) or applied and reported (`configChanges`), never passed over in silence; and every
 * field a reload refuses is in README's list of those that need a restart ("Reloading the configuration").
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { configChanges, loadGatewayConfig, reloadProblems, type GatewayConfig } from '../../src/config/index.js';

const base = loadGatewayConfig({
  env: {},
  base: {
    admin: { enabled: true, port: 9090 },
    auth: { api_keys: ['key-of-t-0001'] },
    pid_file: '/tmp/kvgate.pid',
    replicas: { nats: { servers: ['nats://10.0.0.5:4222'] }, router_id: 'r1' },
    tracing: { otlp_endpoint: 'http://otel:4318' },
    tenants: {
      header: 'x-tenant',
      queue_limit_per_worker: 4,
      classes: [{ name: 'gold', request_rate: 5, token_rate: 500, engine_priority: { min: 0, max: 5 } }],
      members: [{ name: 't', class: 'gold', api_keys: ['key-of-t-0001'] }],
    },
    models: [
      {
        name: 'm',
        router_mode: 'kv',
        session_priority: 'lower_first',
        migration_max_seq_len: 4096,
        workers: [{ id: 1, url: 'http://10.0.0.1:8000', kv_events: 'tcp://10.0.0.1:5557' }],
      },
    ],
  },
});

/** Each leaf of the config (arrays of scalars are leaves; arrays of objects are walked), by its path. */
function leaves(value: unknown, path: (string | number)[] = []): (string | number)[][] {
  if (value === null || typeof value !== 'object') return [path];
  if (Array.isArray(value) && (value.length === 0 || typeof value[0] !== 'object')) return [path];
  return Object.entries(value).flatMap(([k, v]) => leaves(v, [...path, Array.isArray(value) ? Number(k) : k]));
}

/** `base` with the leaf at `path` changed (the checks compare values; they do not validate them). */
function changedAt(path: readonly (string | number)[]): GatewayConfig {
  const next = structuredClone(base) as unknown as Record<string | number, unknown>;
  const parent = path.slice(0, -1).reduce((n, k) => n[k] as Record<string | number, unknown>, next);
  const key = path.at(-1)!;
  const v = parent[key];
  parent[key] =
    typeof v === 'number'
      ? v + 1
      : typeof v === 'boolean'
        ? !v
        : typeof v === 'string'
          ? `${v}x`
          : Array.isArray(v)
            ? [...(v as unknown[]), 'more']
            : 7;
  return next as unknown as GatewayConfig;
}

const fields = leaves(base).filter((p) => p[0] !== 'warnings' && p[0] !== 'file');

describe('config reload: every field classified', () => {
  it('refuses or reports a change to every field of the config', () => {
    expect(fields.length).toBeGreaterThan(150);
    const silent = fields
      .filter((p) => reloadProblems(base, changedAt(p)).length + configChanges(base, changedAt(p)).length === 0)
      .map((p) => p.join('.'));
    expect(silent).toEqual([]);
  });

  it("lists every field a reload refuses in README's fields that need a restart", () => {
    const readme = readFileSync(new URL('../../README.md', import.meta.url), 'utf8');
    const bullet = /^- Needs a restart \(a reload that changes it is rejected\):[\s\S]*?(?=^- )/m.exec(readme)?.[0];
    expect(bullet).toBeDefined();
    const listed = new Set([...bullet!.matchAll(/`([a-z_.]+)`/g)].map((m) => m[1]!));
    const refused = new Set(fields.flatMap((p) => reloadProblems(base, changedAt(p)).map((x) => x.path)));
    const missing = [...refused].filter((path) => {
      if (path === 'models') return !bullet!.includes('the list of models');
      // Per model: README names the field (a router knob by its own name); a section covers its fields.
      const name = path.replace(/^models\[\d+\]\./, '').replace(/^router\./, '');
      const parts = name.split('.');
      return !parts.some((_, i) => listed.has(parts.slice(0, i + 1).join('.')));
    });
    expect(missing).toEqual([]);
  });
});
