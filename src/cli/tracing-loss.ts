/**
 * Spans that `kvgate serve`'s tracing loses while it runs, made loud: counted in
 * `kvgate_tracing_spans_dropped_total{reason}` and logged once per episode. Without this, the OpenTelemetry SDK
 * reports a failed export to its own error handler and diagnostic logger, which nothing reads: a collector that
 * is down, refuses or never answers loses every trace without a word.
 *
 * The SDK's own hooks, nothing of its internals:
 * - `export_failed`: the batch processor's exporter is wrapped, and each export whose result is
 *   `ExportResultCode.FAILED` (refused, an error status, a timeout, the exporter's concurrent-export limit)
 *   counts its spans;
 * - `queue_full`: the batch processor drops the spans that end while its queue is full (`maxQueueSize`) and says
 *   how many on the diagnostic logger ("Dropped N spans because maxQueueSize reached") as the next span finds room;
 *   the diagnostic logger is routed here at warn, and its other warnings and errors become warn lines.
 *
 * An episode of loss begins with the first spans lost (a warn line with the reason and the error) and ends with
 * the first export that succeeds while the queue dropped nothing since the export before (an info line with the
 * spans lost meanwhile); failed batches in between are counted, not logged. The export failures the batch
 * processor reports to the SDK's global error handler, one per batch, are debug lines.
 *
 * Once shutdown begins, losses are still counted but not logged here: shutdown's own warn line reports the spans
 * it gives up.
 */
import { format } from 'node:util';
import { diag, DiagLogLevel, type DiagLogger } from '@opentelemetry/api';
import { ExportResultCode, loggingErrorHandler, setGlobalErrorHandler, type ExportResult } from '@opentelemetry/core';
import type { ReadableSpan, SpanExporter } from '@opentelemetry/sdk-trace-node';
import type { Counter } from 'prom-client';
import type { Logger } from '../common/index.js';

export type SpanLossReason = 'export_failed' | 'queue_full';
const REASONS: readonly SpanLossReason[] = ['export_failed', 'queue_full'];

/** The batch processor's report of the spans it dropped at a full queue (sdk-trace-base's BatchSpanProcessorBase). */
const QUEUE_DROPS = /^Dropped (\d+) spans because maxQueueSize reached/;
/** The SDK's warnings kept until `attach`, at most. */
const EARLY_WARNINGS = 16;

export class SpanLossWatch {
  #logger: Logger | undefined;
  #counter: Counter<'reason'> | undefined;
  /** Spans lost before `attach`, added to the counter when it comes. */
  readonly #pending: Record<SpanLossReason, number> = { export_failed: 0, queue_full: 0 };
  /** The open episode: spans lost since it began, and whether its warn line is written yet. */
  #episode: { lost: number; logged: boolean; reason: SpanLossReason; err: unknown } | undefined;
  /** The queue dropped spans since the last export ended: a success then does not end the episode. */
  #queueDropped = false;
  #stopping = false;
  /** The SDK's warnings before `attach` (its configuration's, as the exporter is built), written then; bounded. */
  readonly #early: string[] = [];

  /** Where losses go from now on: the counter gets those already lost, and an open episode its warn line. */
  attach(logger: Logger, counter: Counter<'reason'>): void {
    this.#logger = logger;
    this.#counter = counter;
    for (const reason of REASONS) {
      counter.inc({ reason }, this.#pending[reason]);
      this.#pending[reason] = 0;
    }
    for (const text of this.#early.splice(0)) this.#warnSdk(text);
    this.#logEpisodeStart();
  }

  /** `exporter`, its failed exports counted and a success ending an episode. */
  exporter(exporter: SpanExporter): SpanExporter {
    return {
      export: (spans: ReadableSpan[], done: (result: ExportResult) => void) =>
        exporter.export(spans, (result) => {
          if (result.code === ExportResultCode.FAILED) this.#lost('export_failed', spans.length, result.error);
          else this.#exported();
          done(result);
        }),
      shutdown: () => exporter.shutdown(),
      forceFlush: () => exporter.forceFlush?.() ?? Promise.resolve(),
    };
  }

  /** Routes the SDK's diagnostic logger (at warn) and its global error handler here; `uninstall` undoes both. */
  install(): void {
    const warn = (message: string, ...args: unknown[]): void => this.#diagnostic(format(message, ...args));
    const quiet = (): void => undefined;
    const logger: DiagLogger = { error: warn, warn, info: quiet, debug: quiet, verbose: quiet };
    diag.setLogger(logger, { logLevel: DiagLogLevel.WARN, suppressOverrideMessage: true });
    setGlobalErrorHandler((err) => this.#logger?.debug({ err }, 'tracing: a span export failed'));
  }

  uninstall(): void {
    diag.disable();
    setGlobalErrorHandler(loggingErrorHandler());
  }

  /** Shutdown began: its own warn line reports what it gives up. */
  stopping(): void {
    this.#stopping = true;
  }

  #diagnostic(text: string): void {
    const drops = QUEUE_DROPS.exec(text);
    if (drops !== null) {
      this.#queueDropped = true;
      this.#lost('queue_full', Number(drops[1]), undefined);
    } else if (this.#logger !== undefined) this.#warnSdk(text);
    else if (this.#early.length < EARLY_WARNINGS) this.#early.push(text);
  }

  #warnSdk(text: string): void {
    this.#logger?.warn({ sdk: text }, `tracing: the OpenTelemetry SDK warns: ${text}`);
  }

  #lost(reason: SpanLossReason, spans: number, err: unknown): void {
    if (this.#counter !== undefined) this.#counter.inc({ reason }, spans);
    else this.#pending[reason] += spans;
    if (this.#episode !== undefined) this.#episode.lost += spans;
    else {
      this.#episode = { lost: spans, logged: false, reason, err };
      this.#logEpisodeStart();
    }
  }

  #exported(): void {
    const queueDropped = this.#queueDropped;
    this.#queueDropped = false;
    const episode = this.#episode;
    if (episode === undefined || queueDropped) return;
    this.#episode = undefined;
    if (episode.logged && !this.#stopping)
      this.#logger?.info({ lostSpans: episode.lost }, `tracing: spans are exported again (${episode.lost} lost)`);
  }

  #logEpisodeStart(): void {
    const e = this.#episode;
    if (e === undefined || e.logged || this.#logger === undefined || this.#stopping) return;
    e.logged = true;
    const why = e.reason === 'export_failed' ? 'the collector did not take an export' : 'the export queue was full';
    this.#logger.warn(
      { reason: e.reason, lostSpans: e.lost, ...(e.err !== undefined ? { err: e.err } : {}) },
      `tracing: spans are being lost (${why}); counted in kvgate_tracing_spans_dropped_total until exports succeed`,
    );
  }
}
