/** TenantDirectory: who a request belongs to, and its tenant's request and prompt-token buckets. */
import { describe, expect, it } from 'vitest';
import { loadGatewayConfig, type TenantsConfig } from '../../src/config/index.js';
import { KvgateError } from '../../src/errors/index.js';
import { TenantDirectory } from '../../src/frontend/tenants.js';
import { KvgateMetrics } from '../../src/metrics/index.js';
import { sampleSum } from '../helpers/metric-sum.js';

const KEY_A = 'key-of-acme-123';
const KEY_B = 'key-of-beta-456';

function tenants(section: unknown): TenantsConfig {
  const model = { name: 'm', router_mode: 'round-robin', workers: [{ id: 1, url: 'http://10.0.0.1:8000' }] };
  return loadGatewayConfig({ base: { models: [model], auth: { api_keys: [KEY_A, KEY_B] }, tenants: section }, env: {} })
    .tenants;
}

const SECTION = {
  header: 'x-tenant',
  default_class: 'free',
  classes: [
    { name: 'gold', weight: 4, request_rate: 2, request_burst: 2 },
    { name: 'free', token_rate: 100, token_burst: 300 },
  ],
  members: [
    { name: 'acme', class: 'gold', api_keys: [KEY_A] },
    { name: 'beta', class: 'free' },
  ],
};

function refusal(fn: () => void): KvgateError {
  try {
    fn();
  } catch (err) {
    return err as KvgateError;
  }
  throw new Error('expected a refusal');
}

describe('TenantDirectory', () => {
  it('names the tenant by API key first, then by the header, else other', () => {
    const d = new TenantDirectory(tenants(SECTION));
    expect(d.of(`Bearer ${KEY_A}`, { 'x-tenant': 'beta' }).hint).toMatchObject({ tenant: 'acme', class: 'gold' });
    expect(d.of(`Bearer ${KEY_B}`, { 'x-tenant': 'beta' }).hint).toMatchObject({ tenant: 'beta', class: 'free' });
    expect(d.of(undefined, { 'x-tenant': 'nobody' }).hint).toMatchObject({ tenant: 'other', class: 'free' });
    expect(d.of(undefined, { 'x-tenant': 'other' }).hint.tenant).toBe('other');
    expect(d.of(undefined, {}).hint).toMatchObject({ tenant: 'other', weight: 1, priority: 0 });
    expect(d.labels.sort()).toEqual(['acme', 'beta', 'other']);
  });

  it('spends the request rate as requests arrive, refuses beyond it with the wait as retryAfterSeconds, and refills with the clock', async () => {
    let now = 0;
    const metrics = new KvgateMetrics({ processMetrics: false });
    const d = new TenantDirectory(tenants(SECTION), metrics, () => now);
    const acme = d.of(`Bearer ${KEY_A}`, {});
    d.arrive(acme);
    d.admit(acme, 10);
    d.arrive(acme); // arrived, never admitted (a bad body, say): the request is spent all the same
    const e = refusal(() => d.arrive(acme));
    expect(e.code).toBe('KVG_ERR_RATE_LIMITED');
    expect(e.statusCode).toBe(429);
    expect(e.detail).toMatchObject({ tenant: 'acme', retryAfterSeconds: 1 });
    expect(e.message).toContain('2 requests/s');
    now += 500; // 2 requests/s: one more after half a second
    d.arrive(acme);
    d.admit(acme, 10);
    expect(() => d.arrive(acme)).toThrow(KvgateError);
    d.admit(acme, 10); // the class has no token rate: admission spends nothing
    const text = await metrics.text();
    expect(sampleSum(text, 'kvgate_tenant_requests_admitted_total', { tenant: 'acme' })).toBe(3);
    expect(sampleSum(text, 'kvgate_tenant_requests_rate_limited_total', { tenant: 'acme' })).toBe(2);
    expect(sampleSum(text, 'kvgate_tenant_requests_admitted_total', { tenant: 'beta' })).toBe(0);
  });

  it('counts prompt tokens against the token bucket; a prompt over the bucket never fits; other tenants keep theirs', () => {
    let now = 0;
    const d = new TenantDirectory(tenants(SECTION), undefined, () => now);
    const beta = d.of(undefined, { 'x-tenant': 'beta' });
    const other = d.of(undefined, {});
    for (let i = 0; i < 10; i++) d.arrive(beta); // no request rate in its class: arrivals spend nothing
    d.admit(beta, 250);
    const short = refusal(() => d.admit(beta, 100));
    expect(short.detail).toMatchObject({ retryAfterSeconds: 1 });
    expect(short.message).toContain('100 prompt tokens/s');
    d.admit(other, 250); // undeclared tenants share one bucket, not beta's
    expect(refusal(() => d.admit(beta, 301)).detail).toMatchObject({ tokenBurst: 300 });
    now += 1000;
    d.admit(beta, 100);
  });

  it('a reload keeps what a tenant spent and applies the new limits', () => {
    let now = 0;
    const d = new TenantDirectory(tenants(SECTION), undefined, () => now);
    const acme = d.of(`Bearer ${KEY_A}`, {});
    d.arrive(acme);
    d.arrive(acme);
    d.reconfigure(tenants({ ...SECTION, classes: [{ ...SECTION.classes[0], request_burst: 5 }, SECTION.classes[1]] }));
    expect(() => d.arrive(d.of(`Bearer ${KEY_A}`, {}))).toThrow(KvgateError);
  });
});
