/**
 * The watched-file discovery source: a model's `workers_file`, re-read when
 * it changes and applied through `FleetMembers` (source `file`).
 *
 * Change detection: `fs.watch` on the file's directory (an editor's or a
 * ConfigMap's atomic replace swaps the file, or a symlink beside it, which a
 * watch on the file itself would lose), debounced, and a content check: a
 * re-read that finds the text last seen changes nothing. A file that is invalid
 * or unreadable is rejected whole, with every problem and its field path in
 * the log; the previous workers stay. Every outcome is counted in
 * `kvgate_discovery_updates_total{source="file"}`.
 */
import { watch, readFileSync, type FSWatcher } from 'node:fs';
import { basename, dirname } from 'node:path';
import type { Logger } from 'pino';
import {
  loadWorkersFile,
  workerDiff,
  type ConfigProblem,
  type ModelConfig,
  type WorkerConfig,
} from '../config/index.js';
import type { WorkerRegistry } from '../discovery/index.js';
import { isKvgateError } from '../errors/index.js';
import type { FleetMembers } from './membership.js';
import type { DiscoveryMetrics, WorkerSource } from './source.js';

/** Quiet time after the last change before the file is re-read (an editor's save is several events). */
const DEBOUNCE_MS = 150;

export class WorkersFileSource implements WorkerSource {
  readonly kind = 'file' as const;
  readonly #model: ModelConfig;
  readonly #file: string;
  readonly #members: FleetMembers;
  readonly #registry: WorkerRegistry;
  #current: readonly WorkerConfig[] = [];
  /** The text last read (applied or rejected): the same text again changes nothing. */
  #lastText: string | undefined;
  #watcher: FSWatcher | undefined;
  #timer: NodeJS.Timeout | undefined;
  #sink: { logger: Logger; metrics: DiscoveryMetrics } | undefined;
  #closed = false;

  constructor(model: ModelConfig, registry: WorkerRegistry, members: FleetMembers) {
    this.#model = model;
    this.#file = model.workersFile!;
    this.#registry = registry;
    this.#members = members;
  }

  /**
   * The file's workers at start, validated against the workers registered so far.
   * @throws KvgateError KVG_ERR_INVALID_CONFIG listing every problem (kvgate does not start).
   */
  initial(): readonly WorkerConfig[] {
    this.#lastText = this.#read();
    this.#current = loadWorkersFile(this.#model, this.#taken(), 'kvgate will not start');
    return this.#current;
  }

  /** Watches the file from now on; outcomes go to `logger` and `metrics`. A change since `initial` is applied. */
  start(logger: Logger, metrics: DiscoveryMetrics): void {
    if (this.#closed || this.#watcher !== undefined) return;
    this.#sink = { logger, metrics };
    const name = basename(this.#file);
    // Any event in the directory schedules a check (a symlink swap names another entry); the content check filters.
    this.#watcher = watch(dirname(this.#file), { persistent: false }, () => this.#schedule());
    this.#watcher.on('error', (err) => {
      logger.error(
        { file: this.#file, err: err.message },
        `workers file ${name}: its directory can no longer be watched; the current workers stay until kvgate restarts`,
      );
    });
    logger.info({ file: this.#file, workers: this.#current.map((w) => w.id) }, `watching workers file ${this.#file}`);
    this.#schedule();
  }

  close(): void {
    this.#closed = true;
    this.#watcher?.close();
    if (this.#timer !== undefined) clearTimeout(this.#timer);
  }

  #schedule(): void {
    if (this.#closed) return;
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = setTimeout(() => this.#check(), DEBOUNCE_MS);
    this.#timer.unref();
  }

  /** Ids held by every other worker of the gateway (this file's own may stay or move). */
  #taken(): Map<number, string> {
    const mine = new Set(this.#current.map((w) => w.id));
    const out = new Map<number, string>();
    for (const w of this.#registry.all()) {
      if (!mine.has(w.id))
        out.set(w.id, `worker ${w.id} of model ${w.model} (${this.#members.sourceOf(w.id) ?? 'static'})`);
    }
    return out;
  }

  #read(): string | undefined {
    try {
      return readFileSync(this.#file, 'utf8');
    } catch {
      return undefined;
    }
  }

  #check(): void {
    const sink = this.#sink;
    if (this.#closed || sink === undefined) return;
    const model = this.#model.name;
    const count = (outcome: 'applied' | 'unchanged' | 'rejected'): void =>
      sink.metrics.discoveryUpdates.labels({ model, source: 'file', outcome }).inc();
    const text = this.#read();
    if (text === this.#lastText) return;
    this.#lastText = text;
    let next: WorkerConfig[];
    try {
      next = loadWorkersFile(this.#model, this.#taken(), 'the previous workers stay');
    } catch (err) {
      if (!isKvgateError(err, 'KVG_ERR_INVALID_CONFIG')) throw err;
      count('rejected');
      sink.logger.error(
        { file: this.#file, problems: (err.detail?.problems ?? []) as ConfigProblem[] },
        `workers file rejected: ${err.message}`,
      );
      return;
    }
    const { removed, added } = workerDiff(this.#current, next);
    if (removed.length === 0 && added.length === 0) {
      count('unchanged');
      return;
    }
    for (const w of removed) this.#members.leave(w.id);
    for (const w of added) this.#members.join(w, 'file');
    this.#current = next;
    count('applied');
    sink.logger.info(
      { file: this.#file, joined: added.map((w) => w.id), left: removed.map((w) => w.id) },
      `workers file applied: ${added.length} joined, ${removed.length} left`,
    );
  }
}
