/**
 * Replay progress on stderr (stdout stays clean for `--json`), in two forms:
 *
 * - on a terminal, a one-line bar redrawn in place with `\r`, at most every
 *   `intervalMs`;
 * - anywhere else (CI logs, scripts, files), a plain line every
 *   `lineIntervalMs` (5 s by default), plus the first and the last, so a long
 *   run shows it is alive without flooding the log.
 *
 * `enabled: false` (`--no-progress`) writes nothing. Time comes from an
 * injected clock, so tests can step it.
 */
import { systemClock, type Clock } from '../common/index.js';

export interface ProgressSink {
  write(chunk: string): unknown;
  isTTY?: boolean;
  columns?: number;
}

export interface ProgressBarOptions {
  /** false never writes; otherwise a bar on a terminal, lines elsewhere. Default true. */
  enabled?: boolean;
  /** Terminal: least time between redraws of the bar, ms (100). */
  intervalMs?: number;
  /** Not a terminal: least time between progress lines, ms (5000). */
  lineIntervalMs?: number;
  /** Throttling and elapsed time (default: the process's monotonic clock). */
  clock?: Clock;
}

const BAR_WIDTH = 24;

export class ProgressBar {
  readonly enabled: boolean;
  /** true: a bar redrawn in place; false: one line per report. */
  readonly inPlace: boolean;
  readonly #sink: ProgressSink;
  readonly #intervalMs: number;
  readonly #clock: Clock;
  #label = '';
  #total = 0;
  #startedAt = 0;
  #lastDraw = -Infinity;
  #lastLine = '';

  constructor(sink: ProgressSink, opts: ProgressBarOptions = {}) {
    this.#sink = sink;
    this.enabled = opts.enabled ?? true;
    this.inPlace = sink.isTTY === true;
    this.#intervalMs = this.inPlace ? (opts.intervalMs ?? 100) : (opts.lineIntervalMs ?? 5000);
    this.#clock = opts.clock ?? systemClock;
  }

  /** Starts a new bar (finishing any previous one). */
  start(label: string, total: number): void {
    if (this.#lastLine !== '') this.end();
    this.#label = label;
    this.#total = total;
    this.#startedAt = this.#clock.now();
    this.#lastDraw = -Infinity;
    this.update(0);
  }

  /** Reports if the interval has passed (always at 0 and at total). */
  update(done: number): void {
    if (!this.enabled) return;
    const now = this.#clock.now();
    if (done !== 0 && done !== this.#total && now - this.#lastDraw < this.#intervalMs) return;
    this.#lastDraw = now;
    const frac = this.#total > 0 ? Math.min(1, done / this.#total) : 1;
    const elapsedMs = now - this.#startedAt;
    if (!this.inPlace) {
      const left =
        done > 0 && done < this.#total
          ? `, about ${((elapsedMs * (this.#total - done)) / done / 1000).toFixed(0)} s left`
          : '';
      this.#sink.write(
        `${this.#label}: ${done}/${this.#total} requests (${Math.floor(frac * 100)}%) after ${(elapsedMs / 1000).toFixed(1)} s${left}\n`,
      );
      return;
    }
    const filled = Math.round(frac * BAR_WIDTH);
    let line =
      `${this.#label} [${'#'.repeat(filled)}${'-'.repeat(BAR_WIDTH - filled)}] ` +
      `${Math.floor(frac * 100)}% ${done}/${this.#total} ${(elapsedMs / 1000).toFixed(1)}s`;
    const cols = this.#sink.columns;
    if (cols !== undefined && cols > 10 && line.length >= cols) line = line.slice(0, cols - 1);
    // Pad over the previous line's leftovers.
    const pad = Math.max(0, this.#lastLine.length - line.length);
    this.#sink.write(`\r${line}${' '.repeat(pad)}`);
    this.#lastLine = line;
  }

  /** Terminal: draws nothing more and moves to a new line. */
  end(): void {
    if (!this.enabled || this.#lastLine === '') return;
    this.#sink.write('\n');
    this.#lastLine = '';
  }
}
