/**
 * Spans through the OpenTelemetry API. Nothing here starts the SDK: until the
 * composition root registers one (`kvgate serve` with tracing configured, see
 * cli/tracing.ts), no tracer provider is set, and these helpers start no span
 * at all: no span object, no context, no propagation, no attribute object
 * (`spansOn()` is false; callers build attributes only when it is true).
 * With a provider registered, spans are started as usual and a non-recording
 * (unsampled) span skips the attribute work.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import {
  INVALID_SPAN_CONTEXT,
  ProxyTracerProvider,
  SpanKind,
  SpanStatusCode,
  context,
  createContextKey,
  propagation,
  trace,
  type Attributes,
  type Span,
  type Tracer,
} from '@opentelemetry/api';

/** The tracer of the provider registered now (looked up only when one is: a provider may be registered late, or replaced). */
const tracer = (): Tracer => trace.getTracer('kvgate');

/** The provider a proxy answers with while no real one is registered (the API's no-op singleton). */
const NOOP_PROVIDER = new ProxyTracerProvider().getDelegate();

/** What the helpers hand out while no provider is registered: one shared non-recording span. */
const NO_SPAN: Span = trace.wrapSpanContext(INVALID_SPAN_CONTEXT);
const NO_HEADERS: Readonly<Record<string, string>> = Object.freeze({});

/**
 * Whether a tracer provider is registered (spans may record). Checked per call, so a provider
 * registered (or disabled) later takes effect at once.
 */
export function spansOn(): boolean {
  const provider = trace.getTracerProvider();
  return !(provider instanceof ProxyTracerProvider) || provider.getDelegate() !== NOOP_PROVIDER;
}

/**
 * Runs `fn` inside a child span of the active one; the span ends when `fn` settles (an error marks it).
 * `attributes` may be a function, called only when a span is started.
 */
export function inSpan<T>(
  name: string,
  fn: (span: Span) => Promise<T>,
  attributes?: Attributes | (() => Attributes),
): Promise<T> {
  if (!spansOn()) return fn(NO_SPAN);
  const attrs = typeof attributes === 'function' ? attributes() : attributes;
  const span = tracer().startSpan(name, attrs === undefined ? undefined : { attributes: attrs });
  if (!span.isRecording()) return fn(span);
  return recorded(span, fn);
}

async function recorded<T>(span: Span, fn: (span: Span) => Promise<T>): Promise<T> {
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
  span.setStatus({
    code: SpanStatusCode.ERROR,
    message: typeof code === 'string' ? code : err instanceof Error ? err.message : String(err),
  });
  if (typeof code === 'string') span.setAttribute('kvgate.error.code', code);
}

/** A span another span links to (OpenTelemetry span links; Dynamo's `TraceLink`): its ids and trace flags. */
export interface TraceLink {
  readonly traceId: string;
  readonly spanId: string;
  readonly traceFlags: number;
}

/** The link to a recording span; undefined for a no-op or unsampled one (nothing to link to). */
export function traceLinkOf(span: Span): TraceLink | undefined {
  if (!span.isRecording()) return undefined;
  const { traceId, spanId, traceFlags } = span.spanContext();
  return { traceId, spanId, traceFlags };
}

/**
 * A client span for a call to an engine, a child of the active span, and the W3C headers
 * (`traceparent`, `tracestate`) that carry it to the engine. The caller ends the span.
 * `attributes` is called only when a span is started; without a provider the span is a shared
 * no-op and the headers are empty. `link`: a span this one follows from (a decode leg, its prefill).
 */
export function clientSpan(
  name: string,
  attributes: () => Attributes,
  link?: TraceLink,
): { span: Span; headers: Readonly<Record<string, string>> } {
  if (!spansOn()) return { span: NO_SPAN, headers: NO_HEADERS };
  const span = tracer().startSpan(name, {
    kind: SpanKind.CLIENT,
    attributes: attributes(),
    ...(link !== undefined ? { links: [{ context: link }] } : {}),
  });
  const headers: Record<string, string> = {};
  propagation.inject(trace.setSpan(context.active(), span), headers);
  return { span, headers };
}

/** The request's server span in its context, with whether it was marked failed (`requestFailed`). */
interface RequestSpan {
  readonly span: Span;
  failed: boolean;
}
const REQUEST_SPAN = createContextKey('kvgate.request_span');

/**
 * Runs `fn` (an HTTP request's handling) inside a server span that continues the
 * client's `traceparent` (and `tracestate`); the span ends when the response closes, a
 * client that left before the answer ended marked `kvgate.client_aborted`. A 5xx answer
 * not marked by `requestFailed` is ERROR too.
 */
export function inRequestSpan<T>(req: IncomingMessage, res: ServerResponse, fn: () => T): T {
  if (!spansOn()) return fn();
  const parent = propagation.extract(context.active(), req.headers);
  const span = tracer().startSpan(
    'kvgate.request',
    {
      kind: SpanKind.SERVER,
      attributes: { 'http.request.method': req.method ?? '', 'url.path': (req.url ?? '/').split('?', 1)[0]! },
    },
    parent,
  );
  if (!span.isRecording()) return fn();
  const state: RequestSpan = { span, failed: false };
  res.once('close', () => {
    span.setAttribute('http.response.status_code', res.statusCode);
    if (!res.writableFinished) span.setAttribute('kvgate.client_aborted', true);
    if (res.statusCode >= 500 && !state.failed) span.setStatus({ code: SpanStatusCode.ERROR });
    span.end();
  });
  return context.with(trace.setSpan(parent, span).setValue(REQUEST_SPAN, state), fn);
}

/**
 * The request being served failed with `code` (what its client was answered, before or in its stream): its
 * server span names the code (`kvgate.error.code`) and, for a server-side failure (`statusCode` >= 500, a stream
 * answered 200 whose engine failed included), is ERROR with the code as message. Free when off.
 */
export function requestFailed(code: string, statusCode: number): void {
  if (!spansOn()) return;
  const state = context.active().getValue(REQUEST_SPAN) as RequestSpan | undefined;
  if (state === undefined) return;
  state.span.setAttribute('kvgate.error.code', code);
  if (statusCode < 500) return;
  state.failed = true;
  state.span.setStatus({ code: SpanStatusCode.ERROR, message: code });
}

/** Sets an attribute on the active span (a request's routing facts found outside its route span); free when off. */
export function setActiveSpanAttribute(key: string, value: string | number | boolean): void {
  if (!spansOn()) return;
  trace.getActiveSpan()?.setAttribute(key, value);
}

/** Log fields naming the active recording span's trace (empty when tracing is off or the request is not sampled). */
export function traceLogFields(): { traceId?: string } {
  if (!spansOn()) return {};
  const span = trace.getActiveSpan();
  return span?.isRecording() === true ? { traceId: span.spanContext().traceId } : {};
}
