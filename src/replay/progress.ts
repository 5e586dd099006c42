/**
 * A one-line progress bar for long replays, redrawn in place with `\r` at
 * most every `intervalMs`. Written to stderr so stdout stays clean for
 * `--json`; disabled unless the stream is a terminal or the caller forces it.
 */

export interface ProgressSink {
  write(chunk: string): unknown;
  isTTY?: boolean;
  columns?: number;
}

export interface ProgressBarOptions {
  /** Draw even when the sink is not a terminal (`--progress`); false never draws. Default: only on a TTY. */
  enabled?: boolean;
  intervalMs?: number;
  /** Wall clock for throttling and elapsed time (injectable for tests). */
  now?: () => number;
}

const BAR_WIDTH = 24;

export class ProgressBar {
  readonly enabled: boolean;
  readonly #sink: ProgressSink;
  readonly #intervalMs: number;
  readonly #now: () => number;
  #label = '';
  #total = 0;
  #startedAt = 0;
  #lastDraw = -Infinity;
  #lastLine = '';

  constructor(sink: ProgressSink, opts: ProgressBarOptions = {}) {
    this.#sink = sink;
    this.enabled = opts.enabled ?? sink.isTTY === true;
    this.#intervalMs = opts.intervalMs ?? 100;
    this.#now = opts.now ?? (() => performance.now());
  }

  /** Starts a new bar (finishing any previous one). */
  start(label: string, total: number): void {
    if (this.#lastLine !== '') this.end();
    this.#label = label;
    this.#total = total;
    this.#startedAt = this.#now();
    this.#lastDraw = -Infinity;
    this.update(0);
  }

  /** Redraws if the interval has passed (always at 0 and at total). */
  update(done: number): void {
    if (!this.enabled) return;
    const now = this.#now();
    if (done !== 0 && done !== this.#total && now - this.#lastDraw < this.#intervalMs) return;
    this.#lastDraw = now;
    const frac = this.#total > 0 ? Math.min(1, done / this.#total) : 1;
    const filled = Math.round(frac * BAR_WIDTH);
    const secs = ((now - this.#startedAt) / 1000).toFixed(1);
    let line = `${this.#label} [${'#'.repeat(filled)}${'-'.repeat(BAR_WIDTH - filled)}] ${Math.floor(frac * 100)}% ${done}/${this.#total} ${secs}s`;
    const cols = this.#sink.columns;
    if (cols !== undefined && cols > 10 && line.length >= cols) line = line.slice(0, cols - 1);
    // Pad over the previous line's leftovers.
    const pad = Math.max(0, this.#lastLine.length - line.length);
    this.#sink.write(`\r${line}${' '.repeat(pad)}`);
    this.#lastLine = line;
  }

  /** Draws the final state and moves to a new line. */
  end(): void {
    if (!this.enabled || this.#lastLine === '') return;
    this.#sink.write('\n');
    this.#lastLine = '';
  }
}
