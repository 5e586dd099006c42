/**
 * Sections read only at start that a reload used to pass over in silence (neither refused nor applied):
 * `tracing`, `kv_events`, `replicas`, a model's `lora_adapters` and `inference_pool`. Each change is now
 * refused with its field path, and a URL's credentials never appear in the reason.
 */
import { describe, expect, it } from 'vitest';
import { loadGatewayConfig, reloadProblems } from '../../src/config/index.js';

const model = (extra: Record<string, unknown> = {}): Record<string, unknown> => ({
  name: 'm',
  router_mode: 'round-robin',
  workers: [{ id: 1, url: 'http://10.0.0.1:8000' }],
  ...extra,
});
const load = (base: Record<string, unknown>) => loadGatewayConfig({ base: { models: [model()], ...base }, env: {} });
const paths = (a: Record<string, unknown>, b: Record<string, unknown>): string[] =>
  reloadProblems(load(a), load(b)).map((p) => p.path);

describe('config reload: sections read only at start', () => {
  it('refuses a change to tracing, naming the field', () => {
    expect(paths({}, { tracing: { sample_ratio: 0.5 } })).toEqual(['tracing.sample_ratio']);
    expect(paths({}, { tracing: { otlp_endpoint: 'http://otel:4318' } })).toEqual(['tracing.otlp_endpoint']);
    expect(paths({}, { tracing: { export_timeout_ms: 5000 } })).toEqual(['tracing.export_timeout_ms']);
  });

  it('refuses a change to kv_events bounds, naming the field', () => {
    expect(paths({}, { kv_events: { queue_batches: 7 } })).toEqual(['kv_events.queue_batches']);
    expect(paths({}, { kv_events: { stale_after_ms: 1234 } })).toEqual(['kv_events.stale_after_ms']);
  });

  it('refuses a change to replicas, naming the field', () => {
    const nats = { nats: { servers: ['nats://10.0.0.5:4222'] } };
    expect(paths({ replicas: nats }, { replicas: { ...nats, heartbeat_ms: 2000 } })).toEqual(['replicas.heartbeat_ms']);
    expect(paths({}, { replicas: { ...nats, warm_start: false } })).toEqual(['replicas.nats.servers']);
    const pings = { nats: { ...nats.nats, ping_interval_ms: 500 } };
    expect(paths({ replicas: nats }, { replicas: pings })).toEqual(['replicas.nats.ping_interval_ms']);
  });

  it("refuses a change to a model's lora_adapters or inference_pool", () => {
    const before = loadGatewayConfig({ base: { models: [model()] }, env: {} });
    const after = loadGatewayConfig({ base: { models: [model({ lora_adapters: ['sql'] })] }, env: {} });
    expect(reloadProblems(before, after).map((p) => p.path)).toEqual(['models[0].lora_adapters']);
  });

  it('never shows the credentials of a NATS or OTLP URL in the reason', () => {
    const a = load({ replicas: { nats: { servers: ['nats://alice:s3cret@10.0.0.5:4222'] } } });
    const b = load({
      replicas: { nats: { servers: ['nats://tok3n@10.0.0.6:4222'] } },
      tracing: { otlp_endpoint: 'https://bob:hunter2@otel:4318' },
    });
    const reasons = reloadProblems(a, b).map((p) => p.reason);
    expect(reasons).toHaveLength(2);
    for (const r of reasons) expect(r).not.toMatch(/s3cret|tok3n|hunter2|alice|bob/);
    expect(reasons.join(' ')).toMatch(/10\.0\.0\.6:4222/);
  });

  it('refuses a NATS password change alone, without showing either password', () => {
    const a = load({ replicas: { nats: { servers: ['nats://alice:s3cret@10.0.0.5:4222'] } } });
    const b = load({ replicas: { nats: { servers: ['nats://alice:n3w@10.0.0.5:4222'] } } });
    const problems = reloadProblems(a, b);
    expect(problems.map((p) => p.path)).toEqual(['replicas.nats.servers']);
    expect(problems[0]!.reason).not.toMatch(/s3cret|n3w|alice/);
  });
});
