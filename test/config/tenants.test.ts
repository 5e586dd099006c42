/** The `tenants` section: classes, declared tenants and their keys, the tenant header; reloadable. */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { configChanges, loadGatewayConfig, reloadProblems } from '../../src/config/index.js';

const model = { name: 'm', router_mode: 'round-robin', workers: [{ id: 1, url: 'http://10.0.0.1:8000' }] };
const KEY_A = 'key-of-acme-123';
const KEY_B = 'key-of-beta-456';

const load = (tenants: unknown, keys: string[] = [KEY_A, KEY_B]) =>
  loadGatewayConfig({ base: { models: [model], auth: { api_keys: keys }, tenants }, env: {} });

function problems(tenants: unknown): string {
  try {
    load(tenants);
  } catch (err) {
    return (err as Error).message;
  }
  throw new Error('expected a rejection');
}

describe('config: tenants', () => {
  it('absent: one unlimited class, no declared tenant, no header', () => {
    const c = loadGatewayConfig({ base: { models: [model] }, env: {} });
    expect(c.tenants).toEqual({
      header: undefined,
      defaultClass: 'default',
      queueLimitPerWorker: undefined,
      classes: [
        {
          name: 'default',
          priority: 0,
          weight: 1,
          requestRate: undefined,
          requestBurst: 1,
          tokenRate: undefined,
          tokenBurst: 1,
          enginePriority: undefined,
          maxPriorityJump: 10,
        },
      ],
      members: [],
    });
  });

  it('reads classes (bursts default to one second of the rate), members with their keys, the header', () => {
    const c = load({
      header: 'X-Tenant',
      default_class: 'standard',
      queue_limit_per_worker: 16,
      classes: [
        {
          name: 'gold',
          priority: 1,
          weight: 4,
          request_rate: 2.5,
          token_rate: 1000,
          token_burst: 5000,
          max_priority_jump: 2.5,
        },
        { name: 'standard' },
      ],
      members: [
        { name: 'acme', class: 'gold', api_keys: [KEY_A] },
        { name: 'beta', class: 'standard' },
      ],
    });
    expect(c.tenants.header).toBe('x-tenant');
    expect(c.tenants.defaultClass).toBe('standard');
    expect(c.tenants.queueLimitPerWorker).toBe(16);
    expect(c.tenants.classes[0]).toEqual({
      name: 'gold',
      priority: 1,
      weight: 4,
      requestRate: 2.5,
      requestBurst: 3,
      tokenRate: 1000,
      tokenBurst: 5000,
      enginePriority: undefined,
      maxPriorityJump: 2.5,
    });
    expect(c.tenants.classes[1]!.maxPriorityJump).toBe(10);
    expect(c.tenants.members).toEqual([
      { name: 'acme', class: 'gold', apiKeys: [KEY_A] },
      { name: 'beta', class: 'standard', apiKeys: [] },
    ]);
  });

  it('refuses unknown classes, keys auth does not accept (without echoing them), reserved and repeated names', () => {
    const msg = problems({
      classes: [
        { name: 'gold', weight: 0, max_priority_jump: -1 },
        { name: 'gold', max_priority_jump: 3601 },
      ],
      default_class: 'silver',
      members: [
        { name: 'other', class: 'gold' },
        { name: 'acme', class: 'bronze', api_keys: ['not-a-configured-key'] },
        { name: 'acme', class: 'gold', api_keys: [KEY_A] },
        { name: 'beta', class: 'gold', api_keys: [KEY_A] },
      ],
    });
    expect(msg).toMatch(/tenants\.classes\[0\]\.weight: must be an integer in \[1, 1000\]/);
    expect(msg).toMatch(/tenants\.classes\[1\]\.name: repeats the name "gold"/);
    expect(msg).toMatch(/tenants\.classes\[0\]\.max_priority_jump: must be a number in \[0, 3600\]/);
    expect(msg).toMatch(/tenants\.classes\[1\]\.max_priority_jump: must be a number in \[0, 3600\]/);
    expect(msg).toMatch(/tenants\.default_class: must name one of tenants\.classes/);
    expect(msg).toMatch(/tenants\.members\[0\]\.name: "other" is reserved/);
    expect(msg).toMatch(/tenants\.members\[1\]\.class: must name one of tenants\.classes/);
    expect(msg).toMatch(/tenants\.members\[1\]\.api_keys\[0\]: must be one of the keys auth accepts/);
    expect(msg).not.toContain('not-a-configured-key');
    expect(msg).toMatch(/tenants\.members\[2\]\.name: repeats the name "acme"/);
    expect(msg).toMatch(/tenants\.members\[3\]\.api_keys: shares a key with tenant acme/);
  });

  it('engine_priority: absent (not forwarded), a range with either bound left out, refused when inverted or not integers', () => {
    const c = load({
      classes: [
        { name: 'a' },
        { name: 'b', engine_priority: { min: -10, max: 10 } },
        { name: 'c', engine_priority: { min: 0 } },
        { name: 'd', engine_priority: {} },
      ],
    });
    const max = Number.MAX_SAFE_INTEGER;
    expect(c.tenants.classes.map((k) => k.enginePriority)).toEqual([
      undefined,
      { min: -10, max: 10 },
      { min: 0, max },
      { min: -max, max },
    ]);
    const msg = problems({
      classes: [
        { name: 'a', engine_priority: { min: 5, max: 1 } },
        { name: 'b', engine_priority: { min: 0.5, lowest: 1 } },
        { name: 'c', engine_priority: 'forward' },
      ],
    });
    expect(msg).toMatch(/tenants\.classes\[0\]\.engine_priority\.max: must be at least min \(5\), got 1/);
    expect(msg).toMatch(/tenants\.classes\[1\]\.engine_priority\.min: must be an integer/);
    expect(msg).toMatch(/tenants\.classes\[1\]\.engine_priority\.lowest: unknown field/);
    expect(msg).toMatch(/tenants\.classes\[2\]\.engine_priority: must be an object/);
  });

  it('a reload may change it; the change is logged without the keys', () => {
    const prev = load({ classes: [{ name: 'gold' }], members: [{ name: 'acme', class: 'gold', api_keys: [KEY_A] }] });
    const next = load({
      classes: [{ name: 'gold', weight: 3, engine_priority: { min: 0, max: 10 } }],
      members: [{ name: 'acme', class: 'gold', api_keys: [KEY_B] }],
    });
    expect(reloadProblems(prev, next)).toEqual([]);
    const changes = configChanges(prev, next);
    expect(changes).toContainEqual({ path: 'tenants.classes[gold].weight', from: 1, to: 3 });
    expect(changes).toContainEqual({
      path: 'tenants.classes[gold].engine_priority',
      from: 'unset',
      to: '{"min":0,"max":10}',
    });
    expect(changes).toContainEqual({
      path: 'tenants.members[acme].api_keys',
      from: '1 key(s)',
      to: '1 key(s) (1 added, 1 removed)',
    });
    expect(JSON.stringify(changes)).not.toContain(KEY_A);
    expect(JSON.stringify(changes)).not.toContain(KEY_B);
  });

  it('a tenants-only change says which tenant or class and which field, never with identical from and to', () => {
    const gold = { name: 'gold', request_rate: 5 };
    const prev = load({ classes: [gold], members: [{ name: 'acme', class: 'gold', api_keys: [KEY_A] }] });
    const next = load({
      header: 'X-Tenant',
      queue_limit_per_worker: 8,
      classes: [{ ...gold, request_rate: 10 }, { name: 'free' }],
      members: [
        { name: 'acme', class: 'free', api_keys: [KEY_B] },
        { name: 'beta', class: 'gold' },
      ],
    });
    const changes = configChanges(prev, next);
    expect(changes).toEqual([
      { path: 'tenants.header', from: 'unset', to: 'x-tenant' },
      { path: 'tenants.queue_limit_per_worker', from: 'unset', to: 8 },
      {
        path: 'tenants.classes[free]',
        to: 'priority 0, weight 1, request_rate unset, request_burst 1, token_rate unset, token_burst 1, engine_priority unset, max_priority_jump 10',
      },
      { path: 'tenants.classes[gold].request_rate', from: 5, to: 10 },
      { path: 'tenants.classes[gold].request_burst', from: 5, to: 10 },
      { path: 'tenants.members[beta]', to: 'class gold, 0 key(s)' },
      { path: 'tenants.members[acme].class', from: 'gold', to: 'free' },
      { path: 'tenants.members[acme].api_keys', from: '1 key(s)', to: '1 key(s) (1 added, 1 removed)' },
    ]);
    for (const c of changes) expect(JSON.stringify(c.from)).not.toBe(JSON.stringify(c.to));
    // A tenant removed, and a key replaced in auth alone: both said, neither key shown.
    const fewer = load({ classes: [gold], members: [] }, [KEY_B]);
    const gone = configChanges(prev, fewer);
    expect(gone).toContainEqual({ path: 'tenants.members[acme]', from: 'class gold, 1 key(s)' });
    expect(gone).toContainEqual({ path: 'auth.api_keys', from: '2 key(s)', to: '1 key(s) (0 added, 1 removed)' });
    expect(JSON.stringify(gone)).not.toMatch(/key-of/);
  });
});

describe("the README's Tenants example", () => {
  it('loads with its key in the environment', () => {
    const readme = readFileSync(new URL('../../README.md', import.meta.url), 'utf8');
    const from = readme.indexOf('\n## Tenants\n');
    expect(from).toBeGreaterThan(0);
    const yaml = /```yaml\n([\s\S]*?)```/.exec(readme.slice(from))![1]!;
    const c = loadGatewayConfig({
      base: { ...(parse(yaml) as Record<string, unknown>), models: [model] },
      env: { KVGATE_API_KEYS: 'acme-secret-key-1,another-key-2' },
    });
    expect(c.tenants.classes.map((k) => k.name)).toEqual(['team', 'partner', 'free']);
    expect(c.tenants.members.map((m) => [m.name, m.class, m.apiKeys.length])).toEqual([
      ['acme', 'partner', 1],
      ['research', 'team', 0],
    ]);
  });
});
