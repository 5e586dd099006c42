/**
 * The span helpers cost nothing while no tracer provider is registered (no span, no context, no
 * attributes built, no propagation headers), and trace as before once one is (issue 18, round 2:
 * spans free when tracing is off).
 */
import { context, propagation, trace } from '@opentelemetry/api';
import { InMemorySpanExporter, NodeTracerProvider, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-node';
import { afterEach, describe, expect, it } from 'vitest';
import { clientSpan, inSpan, spansOn } from '../../src/common/tracing.js';

afterEach(() => {
  trace.disable();
  propagation.disable();
  context.disable();
});

describe('span helpers', () => {
  it('without a tracer provider: no span is started and no attribute or header is built', async () => {
    expect(spansOn()).toBe(false);
    let built = 0;
    const attributes = (): Record<string, string> => {
      built++;
      return { a: 'b' };
    };
    const recording = await inSpan('kvgate.test', async (span) => span.isRecording(), attributes);
    expect(recording).toBe(false);
    const c = clientSpan('kvgate.engine.test', attributes);
    expect(c.span.isRecording()).toBe(false);
    expect(c.headers).toEqual({});
    expect(built).toBe(0);
  });

  it('with a provider registered: spans record with their attributes and the engine gets a traceparent', async () => {
    const exporter = new InMemorySpanExporter();
    const provider = new NodeTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
    provider.register();
    expect(spansOn()).toBe(true);
    const headers = await inSpan(
      'kvgate.test',
      async () => {
        const c = clientSpan('kvgate.engine.test', () => ({ 'kvgate.worker_id': 3 }));
        c.span.end();
        return c.headers;
      },
      () => ({ 'kvgate.model': 'm' }),
    );
    expect(headers.traceparent).toMatch(/^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/);
    const spans = exporter.getFinishedSpans();
    expect(spans.map((s) => s.name).sort()).toEqual(['kvgate.engine.test', 'kvgate.test']);
    const outer = spans.find((s) => s.name === 'kvgate.test')!;
    const inner = spans.find((s) => s.name === 'kvgate.engine.test')!;
    expect(outer.attributes).toEqual({ 'kvgate.model': 'm' });
    expect(inner.attributes).toEqual({ 'kvgate.worker_id': 3 });
    expect(inner.spanContext().traceId).toBe(outer.spanContext().traceId);
    await provider.shutdown();
    trace.disable();
    expect(spansOn()).toBe(false);
  });
});
