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
 * - `rejected`: a collector that answers an export with an OTLP partial success (`partialSuccess.rejectedSpans`
 *   above 0) dropped that many of its spans; the exporter calls the export a success and says so on the diagnostic
 *   logger ("Received Partial Success response:", the object as JSON) just before it reports the result.
 * The diagnostic logger is routed here at warn, and its other warnings and errors become warn lines, throttled:
 * the first of a text is a line, its repeats within the minute after are counted, then one line says how many
 * (at shutdown too), so that a diagnostic fired per span or per export cannot flood the log.
 *
 * An episode of loss begins with the first spans lost (a warn line with the reason and the error) and ends with
 * the first export that succeeds whole while the queue dropped nothing since the export before (an info line with
 * the spans lost meanwhile); failed batches in between are counted, not logged. The export failures the batch
 * processor reports to the SDK's global error handler, one per batch, are debug lines.
 *
 * Once shutdown begins, losses are still counted but not logged here: they are tallied, and `givenUp` adds the
 * exports still in flight when shutdown ends (counted as `export_failed`), for shutdown's own warn line.
 */
import { format } from 'node:util';
import { diag, DiagLogLevel, type DiagLogger } from '@opentelemetry/api';
import { ExportResultCode, loggingErrorHandler, setGlobalErrorHandler, type ExportResult } from '@opentelemetry/core';
import type { ReadableSpan, SpanExporter } from '@opentelemetry/sdk-trace-node';
import type { Counter } from 'prom-client';
import type { Logger } from '../common/index.js';

export type SpanLossReason = 'export_failed' | 'queue_full' | 'rejected';
const REASONS: readonly SpanLossReason[] = ['export_failed', 'queue_full', 'rejected'];
const noLosses = (): Record<SpanLossReason, number> => ({ export_failed: 0, queue_full: 0, rejected: 0 });
const WHY: Record<SpanLossReason, string> = {
  export_failed: 'the collector did not take an export',
  queue_full: 'the export queue was full',
  rejected: 'the collector rejected spans of an export',
};

/** The batch processor's report of the spans it dropped at a full queue (sdk-trace-base's BatchSpanProcessorBase). */
const QUEUE_DROPS = /^Dropped (\d+) spans because maxQueueSize reached/;
/** The OTLP exporter's report of a partial success (otlp-exporter-base's logging response handler); the JSON follows. */
const PARTIAL_SUCCESS = 'Received Partial Success response:';
/** The SDK's warnings kept until `attach`, at most. */
const EARLY_WARNINGS = 16;
/** Repeats of an SDK warning this long after its line are counted, then summed up in one line. */
const DIAGNOSTIC_WINDOW_MS = 60_000;
/** Distinct SDK warnings given a line of their own per window; the others are counted together. */
const DIAGNOSTIC_KINDS = 32;
const OTHER_DIAGNOSTICS = '(other warnings)';

/** The spans a partial success rejected (OTLP/JSON writes the int64 as a string) and the collector's message. */
function partialSuccess(json: unknown): { rejected: number; message: string } | undefined {
  try {
    const p = JSON.parse(String(json)) as { rejectedSpans?: unknown; errorMessage?: unknown } | null;
    const rejected = Number(p?.rejectedSpans ?? 0);
    const message = typeof p?.errorMessage === 'string' ? p.errorMessage : '';
    return Number.isSafeInteger(rejected) && rejected > 0 ? { rejected, message } : undefined;
  } catch {
    return undefined;
  }
}

export class SpanLossWatch {
  #logger: Logger | undefined;
  #counter: Counter<'reason'> | undefined;
  /** Spans lost before `attach`, added to the counter when it comes. */
  readonly #pending = noLosses();
  /** The open episode: spans lost since it began, whether its warn line is written yet, and its cause's fields. */
  #episode: { lost: number; logged: boolean; reason: SpanLossReason; cause: Record<string, unknown> } | undefined;
  /** Spans were lost since the last export ended (the queue's drops, a partial success): a success then does not end the episode. */
  #lostSinceExport = false;
  /** Shutdown began: what it has lost since, by reason. */
  #stopping: Record<SpanLossReason, number> | undefined;
  /** The exports handed to the exporter and not answered yet: their span counts. */
  readonly #inFlight = new Set<{ spans: number; givenUp: boolean }>();
  /** The SDK's warnings before `attach` (its configuration's, as the exporter is built), written then; bounded. */
  readonly #early: string[] = [];
  /** The SDK's warnings given a line in this window, with their repeats since; the window's end sums them up. */
  readonly #repeats = new Map<string, number>();
  #window: NodeJS.Timeout | undefined;

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

  /** `exporter`, its failed exports counted and a success ending an episode; the exports in flight known. */
  exporter(exporter: SpanExporter): SpanExporter {
    return {
      export: (spans: ReadableSpan[], done: (result: ExportResult) => void) => {
        const flight = { spans: spans.length, givenUp: false };
        this.#inFlight.add(flight);
        exporter.export(spans, (result) => {
          this.#inFlight.delete(flight);
          // Given up by shutdown: already counted.
          if (!flight.givenUp)
            if (result.code === ExportResultCode.FAILED)
              this.#lost('export_failed', spans.length, { err: result.error });
            else this.#exported();
          done(result);
        });
      },
      shutdown: () => exporter.shutdown(),
      forceFlush: () => exporter.forceFlush?.() ?? Promise.resolve(),
    };
  }

  /** Routes the SDK's diagnostic logger (at warn) and its global error handler here; `uninstall` undoes both. */
  install(): void {
    const warn = (message: string, ...args: unknown[]): void => this.#diagnostic(message, args);
    const quiet = (): void => undefined;
    const logger: DiagLogger = { error: warn, warn, info: quiet, debug: quiet, verbose: quiet };
    diag.setLogger(logger, { logLevel: DiagLogLevel.WARN, suppressOverrideMessage: true });
    setGlobalErrorHandler((err) => this.#logger?.debug({ err }, 'tracing: a span export failed'));
  }

  /** Undoes `install`; the repeats of SDK warnings not summed up yet are, now. */
  uninstall(): void {
    diag.disable();
    setGlobalErrorHandler(loggingErrorHandler());
    this.#endWindow();
  }

  /** Shutdown began: its losses are tallied for its own warn line (`givenUp`), not logged here. */
  stopping(): void {
    this.#stopping ??= noLosses();
  }

  /**
   * Shutdown is over: the exports still in flight are given up (counted as `export_failed`, their answer ignored if
   * it comes), and the spans lost since `stopping`, by reason, are returned.
   */
  givenUp(): Record<SpanLossReason, number> {
    this.stopping();
    for (const flight of this.#inFlight) {
      flight.givenUp = true;
      this.#lost('export_failed', flight.spans, {});
    }
    this.#inFlight.clear();
    return { ...this.#stopping! };
  }

  #diagnostic(message: string, args: unknown[]): void {
    const rejected = message === PARTIAL_SUCCESS ? partialSuccess(args[0]) : undefined;
    if (rejected !== undefined) {
      // Reported just before the export's result, which the exporter calls a success: it does not end the episode.
      this.#lostSinceExport = true;
      this.#lost('rejected', rejected.rejected, { collectorMessage: rejected.message });
      return;
    }
    const text = format(message, ...args);
    const drops = QUEUE_DROPS.exec(text);
    if (drops !== null) {
      this.#lostSinceExport = true;
      this.#lost('queue_full', Number(drops[1]), {});
    } else if (this.#logger !== undefined) this.#warnSdk(text);
    else if (this.#early.length < EARLY_WARNINGS) this.#early.push(text);
  }

  /** A line for the first of a text in the window; its repeats are counted for the window's end. */
  #warnSdk(text: string): void {
    const key = this.#repeats.has(text) || this.#repeats.size < DIAGNOSTIC_KINDS ? text : OTHER_DIAGNOSTICS;
    const repeats = this.#repeats.get(key);
    if (repeats !== undefined) {
      this.#repeats.set(key, repeats + 1);
      return;
    }
    this.#repeats.set(key, key === OTHER_DIAGNOSTICS ? 1 : 0);
    if (key !== OTHER_DIAGNOSTICS) this.#logger?.warn({ sdk: text }, `tracing: the OpenTelemetry SDK warns: ${text}`);
    if (this.#window === undefined) {
      this.#window = setTimeout(() => this.#endWindow(), DIAGNOSTIC_WINDOW_MS);
      this.#window.unref();
    }
  }

  /** One line per SDK warning repeated in the window, with how many times; the next of any is a line again. */
  #endWindow(): void {
    clearTimeout(this.#window);
    this.#window = undefined;
    for (const [text, repeats] of this.#repeats)
      if (repeats > 0)
        this.#logger?.warn(
          { sdk: text, repeats },
          `tracing: the OpenTelemetry SDK warned ${repeats} more time${repeats === 1 ? '' : 's'}: ${text}`,
        );
    this.#repeats.clear();
  }

  #lost(reason: SpanLossReason, spans: number, cause: Record<string, unknown>): void {
    if (this.#counter !== undefined) this.#counter.inc({ reason }, spans);
    else this.#pending[reason] += spans;
    if (this.#stopping !== undefined) this.#stopping[reason] += spans;
    if (this.#episode !== undefined) this.#episode.lost += spans;
    else {
      this.#episode = { lost: spans, logged: false, reason, cause };
      this.#logEpisodeStart();
    }
  }

  #exported(): void {
    const lostSinceExport = this.#lostSinceExport;
    this.#lostSinceExport = false;
    const episode = this.#episode;
    if (episode === undefined || lostSinceExport) return;
    this.#episode = undefined;
    if (episode.logged && this.#stopping === undefined)
      this.#logger?.info({ lostSpans: episode.lost }, `tracing: spans are exported again (${episode.lost} lost)`);
  }

  #logEpisodeStart(): void {
    const e = this.#episode;
    if (e === undefined || e.logged || this.#logger === undefined || this.#stopping !== undefined) return;
    e.logged = true;
    const cause = Object.fromEntries(Object.entries(e.cause).filter(([, v]) => v !== undefined));
    this.#logger.warn(
      { reason: e.reason, lostSpans: e.lost, ...cause },
      `tracing: spans are being lost (${WHY[e.reason]}); counted in kvgate_tracing_spans_dropped_total until exports succeed`,
    );
  }
}
