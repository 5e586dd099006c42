/**
 * The prefill leg's trace link (Dynamo's `PrefillCompletion.worker_link`): the decode leg's span links to the span of
 * the prefill leg that produced its KV (OpenTelemetry span links), through the request's tracker.
 */
import { context, propagation, trace } from '@opentelemetry/api';
import { InMemorySpanExporter, NodeTracerProvider, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-node';
import { afterEach, describe, expect, it } from 'vitest';
import { RequestTracker } from '../../../src/core/index.js';
import { completionChunk } from './fake-engine.js';
import { closePools, drain, leg, pool, type Pool } from './push-pool.js';

afterEach(() => {
  closePools();
  trace.disable();
  propagation.disable();
  context.disable();
});

/** Dispatches a leg of `phase` with `tracker` and streams its answer to the end. */
async function runLeg(p: Pool, call: number, phase: 'prefill' | 'decode', tracker: RequestTracker): Promise<void> {
  const pending = p.push.dispatch(leg(p, { phase, tracker }));
  const s = (await p.engine.call(call)).answerStream();
  s.send(completionChunk('a', { finish: 'length' }), '[DONE]');
  s.end();
  await drain(await pending);
}

describe('trace links between the legs of a disaggregated request', () => {
  // issue 30: the decode leg was not linked to the prefill's span.
  it("the decode leg's span links to its prefill leg's span", async () => {
    const exporter = new InMemorySpanExporter();
    const provider = new NodeTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
    provider.register();
    const p = pool();
    const tracker = new RequestTracker(p.clock);
    await runLeg(p, 0, 'prefill', tracker);
    await runLeg(p, 1, 'decode', tracker);
    const spans = exporter.getFinishedSpans();
    const prefill = spans.find((s) => s.name === 'kvgate.engine.prefill')!;
    const decode = spans.find((s) => s.name === 'kvgate.engine.decode')!;
    expect(tracker.prefillLink).toEqual({
      traceId: prefill.spanContext().traceId,
      spanId: prefill.spanContext().spanId,
      traceFlags: prefill.spanContext().traceFlags,
    });
    expect(decode.links.map((l) => l.context.spanId)).toEqual([prefill.spanContext().spanId]);
    expect(prefill.links).toEqual([]);
    await provider.shutdown();
  });

  it('without tracing nothing is recorded or linked', async () => {
    const p = pool();
    const tracker = new RequestTracker(p.clock);
    await runLeg(p, 0, 'prefill', tracker);
    expect(tracker.prefillLink).toBeUndefined();
  });
});
