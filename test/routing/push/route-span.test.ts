/**
 * The routing decision's span names the pool by what the leg asks of it: a ModelRouter builds an aggregated
 * model's pool on its decode side (Dynamo's router side, kept in `worker_type` of the session metrics and in the
 * replica channel), yet its `kvgate.route` span says `aggregated`, and only a disaggregated request's decode leg
 * says `decode`.
 */
import { context, propagation, trace } from '@opentelemetry/api';
import { InMemorySpanExporter, NodeTracerProvider, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-node';
import { afterEach, describe, expect, it } from 'vitest';
import { closePools, leg, pool } from './push-pool.js';

afterEach(() => {
  closePools();
  trace.disable();
  propagation.disable();
  context.disable();
});

describe('the kvgate.route span of a pool on the decode side', () => {
  it('says kvgate.pool=aggregated for a request served whole and decode for a decode leg', async () => {
    const exporter = new InMemorySpanExporter();
    const provider = new NodeTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
    provider.register();
    const p = pool({ role: 'decode' });
    await p.push.select(leg(p, { phase: 'aggregated' }), 'query');
    await p.push.select(leg(p, { phase: 'decode' }), 'query');
    const routes = exporter.getFinishedSpans().filter((s) => s.name === 'kvgate.route');
    expect(routes.map((s) => s.attributes['kvgate.pool'])).toEqual(['aggregated', 'decode']);
    // The chosen worker's configured role stays its own attribute.
    expect(routes.map((s) => s.attributes['kvgate.worker_type'])).toEqual(['aggregated', 'aggregated']);
    await provider.shutdown();
  });
});
