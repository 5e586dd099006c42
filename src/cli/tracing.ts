/**
 * OpenTelemetry tracing for `kvgate serve`: off unless configured. When off,
 * nothing is registered and the code paths that start spans talk to the
 * OpenTelemetry API's no-op tracer (no allocation of real spans, no export).
 *
 * On when the config's `tracing.otlp_endpoint` is set, or when the standard
 * `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` / `OTEL_EXPORTER_OTLP_ENDPOINT` is; the
 * config wins. `OTEL_SDK_DISABLED=true` and `OTEL_TRACES_EXPORTER=none` keep it
 * off. The sampler is parent-based (a client's sampled `traceparent` is always
 * followed) over a trace-id ratio: the config's `sample_ratio`, else
 * `OTEL_TRACES_SAMPLER_ARG`, else 1. `OTEL_SERVICE_NAME` names the service
 * (default kvgate). Spans go over OTLP/HTTP (JSON) through a batch processor;
 * W3C trace context is the propagator, so the client's `traceparent` is
 * continued and the engines receive one of the same trace.
 *
 * Each export waits at most `tracing.export_timeout_ms` (2 s by default; when
 * the config names no endpoint, `OTEL_EXPORTER_OTLP_TRACES_TIMEOUT` or
 * `OTEL_EXPORTER_OTLP_TIMEOUT` if set), retries included: it is the exporter's
 * `timeoutMillis` and the batch processor's `exportTimeoutMillis`. Shutdown's
 * last flush is an export like the others, so a collector that is down or
 * never answers holds a stopping kvgate that long at most, not OTLP's 10 s.
 *
 * Spans lost while it runs (an export the collector did not take, a span ended while the batch queue was full)
 * are counted and logged once per episode once `reportLosses` names the logger and the counter (tracing-loss.ts).
 */
import { trace } from '@opentelemetry/api';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { resourceFromAttributes } from '@opentelemetry/resources';
import {
  BatchSpanProcessor,
  NodeTracerProvider,
  ParentBasedSampler,
  TraceIdRatioBasedSampler,
} from '@opentelemetry/sdk-trace-node';
import type { Counter } from 'prom-client';
import type { Logger } from '../common/index.js';
import type { TracingConfig } from '../config/index.js';
import { SpanLossWatch } from './tracing-loss.js';
import { kvgateVersion } from '../version.js';

type Env = Readonly<Record<string, string | undefined>>;

export interface Tracing {
  /** Where spans are sent. */
  readonly endpoint: string;
  readonly sampleRatio: number;
  /** The bound on each export, and so on shutdown's last flush. */
  readonly exportTimeoutMs: number;
  /**
   * Spans lost from now on are counted in `counter` (by reason) and each episode of loss is a warn line on `logger`,
   * its end an info line; those lost before are added to the counter.
   */
  reportLosses(logger: Logger, counter: Counter<'reason'>): void;
  /**
   * Exports what is buffered and stops, within `exportTimeoutMs` when the collector is down or does not answer:
   * the spans it could not export (its last flush's, and those of an export in flight as it began that failed, was
   * partly rejected or is still unanswered at the end) are counted and given up with one warn line on `logger`
   * naming how many. Never rejects; idempotent.
   */
  shutdown(logger: Logger): Promise<void>;
}

/** The OTLP/HTTP traces URL from the config or the environment; undefined when tracing stays off. */
function tracesUrl(config: TracingConfig, env: Env): string | undefined {
  if (
    env.OTEL_SDK_DISABLED?.trim().toLowerCase() === 'true' ||
    env.OTEL_TRACES_EXPORTER?.trim().toLowerCase() === 'none'
  )
    return undefined;
  const base =
    config.otlpEndpoint ??
    (env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT === undefined ? env.OTEL_EXPORTER_OTLP_ENDPOINT : undefined);
  if (base === undefined || base.trim() === '') return env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT || undefined;
  // A base URL gets the signal path (as OTEL_EXPORTER_OTLP_ENDPOINT does); a full traces URL is kept.
  return /\/v1\/traces\/?$/.test(base) ? base : `${base.replace(/\/+$/, '')}/v1/traces`;
}

function sampleRatio(config: TracingConfig, env: Env): number {
  if (config.otlpEndpoint !== undefined) return config.sampleRatio;
  const arg = Number(env.OTEL_TRACES_SAMPLER_ARG);
  return env.OTEL_TRACES_SAMPLER_ARG !== undefined && arg >= 0 && arg <= 1 ? arg : config.sampleRatio;
}

/** The config's bound when it names the endpoint, else OTLP's timeout variables when set (as the exporter reads them). */
function exportTimeoutMs(config: TracingConfig, env: Env): number {
  if (config.otlpEndpoint !== undefined) return config.exportTimeoutMs;
  const v = env.OTEL_EXPORTER_OTLP_TRACES_TIMEOUT || env.OTEL_EXPORTER_OTLP_TIMEOUT;
  const ms = Number(v);
  return v !== undefined && Number.isFinite(ms) && ms > 0 ? ms : config.exportTimeoutMs;
}

/** Starts tracing when configured (see the header); undefined when it stays off. */
export function startTracing(config: TracingConfig, env: Env): Tracing | undefined {
  const endpoint = tracesUrl(config, env);
  if (endpoint === undefined) return undefined;
  const ratio = sampleRatio(config, env);
  const timeoutMs = exportTimeoutMs(config, env);
  const losses = new SpanLossWatch();
  losses.install();
  // The exporter's timeout bounds each request and its retries (a black-holed collector's socket is destroyed at
  // it); the processor's (below) bounds its wait for an export, whatever the exporter does.
  const exporter = losses.exporter(new OTLPTraceExporter({ url: endpoint, timeoutMillis: timeoutMs }));
  const provider = new NodeTracerProvider({
    resource: resourceFromAttributes({
      'service.name': env.OTEL_SERVICE_NAME || 'kvgate',
      'service.version': kvgateVersion(),
    }),
    sampler: new ParentBasedSampler({ root: new TraceIdRatioBasedSampler(ratio) }),
    spanProcessors: [new BatchSpanProcessor(exporter, { scheduledDelayMillis: 1000, exportTimeoutMillis: timeoutMs })],
  });
  // Registers the AsyncLocalStorage context manager and the W3C trace-context propagator globally.
  provider.register();
  let done: Promise<void> | undefined;
  return {
    endpoint,
    sampleRatio: ratio,
    exportTimeoutMs: timeoutMs,
    reportLosses: (logger, counter) => losses.attach(logger, counter),
    shutdown: (logger) => {
      losses.stopping();
      return (done ??= provider
        .shutdown()
        .then(
          () => ({ failed: false, err: undefined }),
          (err: unknown) => ({ failed: true, err }),
        )
        .then(({ failed, err }) => {
          // The exports still unanswered are given up here: counted, and named in the line, before the process exits.
          const byReason = Object.fromEntries(Object.entries(losses.givenUp()).filter(([, n]) => n > 0));
          const lostSpans = Object.values(byReason).reduce((a, n) => a + n, 0);
          if (!failed && lostSpans === 0) return;
          logger.warn(
            { lostSpans, byReason, exportTimeoutMs: timeoutMs, ...(failed ? { err } : {}) },
            `tracing: the last spans could not be exported; given up (${lostSpans} lost at shutdown)`,
          );
        })
        .finally(() => {
          trace.disable();
          losses.uninstall();
        }));
    },
  };
}
