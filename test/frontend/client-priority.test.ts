/** The priorities a client asks for, bounded by its tenant's class (client-priority.ts, TenantDirectory.bound). */
import { describe, expect, it } from 'vitest';
import { jsonMembers, rememberJsonText, writeJsonWith } from '../../src/common/index.js';
import { loadGatewayConfig, type TenantsConfig } from '../../src/config/index.js';
import {
  boundEnginePriority,
  boundPriorityJump,
  type PriorityLimitAction,
} from '../../src/frontend/client-priority.js';
import { TenantDirectory } from '../../src/frontend/tenants.js';
import type { PreparedRequest } from '../../src/frontend/router-port.js';
import { KvgateMetrics } from '../../src/metrics/index.js';
import { sampleSum } from '../helpers/metric-sum.js';
import { kvgateErrorOf } from '../helpers/kvgate-error.js';

const RANGE = { name: 'ops', enginePriority: { min: -5, max: 5 } };
const NONE = { name: 'guests', enginePriority: undefined };

function bound(body: Record<string, unknown>, cls: typeof RANGE | typeof NONE) {
  const told: PriorityLimitAction[] = [];
  const out = boundEnginePriority(body, cls, (a) => told.push(a));
  return { out, told };
}

describe('boundEnginePriority', () => {
  it('takes a client priority out where the class sets no engine_priority, told as stripped', () => {
    const { out, told } = bound({ model: 'm', priority: -10 }, NONE);
    expect(out).toEqual({ model: 'm' });
    expect(Object.hasOwn(out, 'priority')).toBe(false);
    expect(told).toEqual(['stripped']);
  });

  it('clamps into the range, told as clamped; a value within it (or none) leaves the same body', () => {
    expect(bound({ priority: -100 }, RANGE)).toEqual({ out: { priority: -5 }, told: ['clamped'] });
    expect(bound({ priority: 99 }, RANGE)).toEqual({ out: { priority: 5 }, told: ['clamped'] });
    const within = { priority: 3 };
    expect(bound(within, RANGE)).toEqual({ out: within, told: [] });
    expect(bound(within, RANGE).out).toBe(within);
    const none = { model: 'm' };
    expect(bound(none, NONE).out).toBe(none);
    expect(bound(none, RANGE).out).toBe(none);
  });

  it('refuses a priority that is not an integer where the class forwards one, naming the field', () => {
    for (const v of [1.5, '1', null]) {
      const e = kvgateErrorOf(() => bound({ priority: v }, RANGE));
      expect(e.code).toBe('KVG_ERR_INVALID_REQUEST');
      expect(e.detail).toMatchObject({ param: 'priority' });
    }
    // Not forwarded at all: whatever it is, it is dropped.
    expect(bound({ priority: 'high' }, NONE).out).toEqual({});
  });

  it("writes the body from the client's text without the stripped member", () => {
    const text = '{"model":"m","priority":-10,"messages":[]}';
    const body = JSON.parse(text) as Record<string, unknown>;
    rememberJsonText(body, text, jsonMembers(text));
    expect(writeJsonWith(bound(body, NONE).out)).toBe('{"model":"m","messages":[]}');
    expect(writeJsonWith(bound(body, RANGE).out)).toBe('{"model":"m","priority":-5,"messages":[]}');
  });
});

describe('boundPriorityJump', () => {
  const bound = (priorityJump: number | undefined, maxPriorityJump: number) => {
    const told: PriorityLimitAction[] = [];
    const hints = { priorityJump, session: { id: 's' } };
    const out = boundPriorityJump(hints, { maxPriorityJump }, (a) => told.push(a));
    return { out, told, same: out === hints };
  };

  it('clamps a jump above the class maximum to it, told as clamped, the other hints kept', () => {
    expect(bound(1e9, 10)).toEqual({ out: { priorityJump: 10, session: { id: 's' } }, told: ['clamped'], same: false });
    expect(bound(0.5, 0)).toMatchObject({ out: { priorityJump: 0 }, told: ['clamped'] });
  });

  it('leaves a jump at or below the maximum, and none, as they are', () => {
    expect(bound(10, 10)).toMatchObject({ told: [], same: true });
    expect(bound(2, 10)).toMatchObject({ told: [], same: true });
    expect(bound(undefined, 0)).toMatchObject({ told: [], same: true });
  });
});

describe('TenantDirectory.bound', () => {
  function tenants(): TenantsConfig {
    const model = { name: 'm', router_mode: 'round-robin', workers: [{ id: 1, url: 'http://10.0.0.1:8000' }] };
    const section = {
      header: 'x-tenant',
      classes: [{ name: 'guests' }, { name: 'ops', engine_priority: { min: -5, max: 5 }, max_priority_jump: 30 }],
      members: [{ name: 'acme', class: 'ops' }],
    };
    return loadGatewayConfig({ base: { models: [model], tenants: section }, env: {} }).tenants;
  }
  const prepared = (body: Record<string, unknown>, priorityJump?: number) =>
    ({ body, hints: { priorityJump } }) as unknown as PreparedRequest;

  it("bounds by the tenant's class, sets the tenant on the hints, and counts each bound per tenant", async () => {
    const metrics = new KvgateMetrics({ processMetrics: false });
    const d = new TenantDirectory(tenants(), metrics);
    const acme = d.of(undefined, { 'x-tenant': 'acme' });
    const other = d.of(undefined, {});
    const a = d.bound(acme, prepared({ priority: -9 }));
    expect(a.body).toEqual({ priority: -5 });
    expect(a.hints.tenant).toBe(acme.hint);
    expect(d.bound(other, prepared({ priority: -9 })).body).toEqual({});
    d.bound(other, prepared({ priority: 0 }));
    d.bound(acme, prepared({ priority: 2 }));
    // The router queue's jump: the default class's 10 s, ops's 30 s.
    expect(d.bound(other, prepared({}, 1e6)).hints.priorityJump).toBe(10);
    expect(d.bound(acme, prepared({}, 1e6)).hints.priorityJump).toBe(30);
    expect(d.bound(acme, prepared({}, 20)).hints.priorityJump).toBe(20);
    const text = await metrics.text();
    const limits = (tenant: string, action: string): number =>
      sampleSum(text, 'kvgate_tenant_priority_limits_total', { tenant, hint: 'engine_priority', action });
    expect(limits('acme', 'clamped')).toBe(1);
    expect(limits('acme', 'stripped')).toBe(0);
    expect(limits('other', 'stripped')).toBe(2);
    const jumps = (tenant: string): number =>
      sampleSum(text, 'kvgate_tenant_priority_limits_total', { tenant, hint: 'priority_jump', action: 'clamped' });
    expect(jumps('other')).toBe(1);
    expect(jumps('acme')).toBe(1);
  });
});
