/**
 * Spans through the OpenTelemetry API. Nothing here starts the SDK: until the
 * composition root registers one (`kvgate serve` with tracing configured, see
 * cli/tracing.ts), the API's no-op tracer answers, spans are non-recording,
 * and these helpers skip their attribute work (near zero cost when off).
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { SpanKind, SpanStatusCode, context, propagation, trace, type Attributes, type Span } from '@opentelemetry/api';

const tracer = trace.getTracer('kvgate');

/** Runs `fn` inside a child span of the active one; the span ends when `fn` settles (an error marks it). */
export async function inSpan<T>(name: string, fn: (span: Span) => Promise<T>, attributes?: Attributes): Promise<T> {
  const span = tracer.startSpan(name, attributes === undefined ? undefined : { attributes });
  if (!span.isRecording()) return fn(span);
  try {
    return await context.with(trace.setSpan(context.active(), span), fn, undefined, span);
  } catch (err) {
    spanFailed(span, err);
    throw err;
  } finally {
    span.end();
  }
}

/** Marks a span failed with the error's code (a KvgateError's) or message. */
export function spanFailed(span: Span, err: unknown): void {
  if (!span.isRecording()) return;
  const code = (err as { code?: unknown } | null)?.code;
  span.setStatus({ code: SpanStatusCode.ERROR, message: typeof code === 'string' ? code : err instanceof Error ? err.message : String(err) });
  if (typeof code === 'string') span.setAttribute('kvgate.error.code', code);
}

/**
 * A client span for a call to an engine, a child of the active span, and the W3C headers
 * (`traceparent`, `tracestate`) that carry it to the engine. The caller ends the span.
 */
export function clientSpan(name: string, attributes: Attributes): { span: Span; headers: Record<string, string> } {
  const span = tracer.startSpan(name, { kind: SpanKind.CLIENT, attributes });
  const headers: Record<string, string> = {};
  propagation.inject(trace.setSpan(context.active(), span), headers);
  return { span, headers };
}

/**
 * Runs `fn` (an HTTP request's handling) inside a server span that continues the
 * client's `traceparent`; the span ends when the response closes.
 */
export function inRequestSpan<T>(req: IncomingMessage, res: ServerResponse, fn: () => T): T {
  const parent = propagation.extract(context.active(), req.headers);
  const span = tracer.startSpan('kvgate.request', {
    kind: SpanKind.SERVER, attributes: { 'http.request.method': req.method ?? '', 'url.path': (req.url ?? '/').split('?', 1)[0]! },
  }, parent);
  if (!span.isRecording()) return fn();
  res.once('close', () => {
    span.setAttribute('http.response.status_code', res.statusCode);
    if (res.statusCode >= 500) span.setStatus({ code: SpanStatusCode.ERROR });
    span.end();
  });
  return context.with(trace.setSpan(parent, span), fn);
}

/** Log fields naming the active recording span's trace (empty when tracing is off or the request is not sampled). */
export function traceLogFields(): { traceId?: string } {
  const span = trace.getActiveSpan();
  return span?.isRecording() === true ? { traceId: span.spanContext().traceId } : {};
}

