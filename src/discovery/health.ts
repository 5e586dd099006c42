/**
 * Active health checking: probes each worker's GET /health on an interval and
 * flips its availability in the registry after `unhealthyAfter` consecutive
 * failures (down) or one success (up). `reportFailure` lets the dispatch path
 * ask for an immediate probe when a connection fails, so a dead engine stops
 * receiving traffic within one probe round trip instead of one interval.
 *
 * Model check: when a worker first answers its health probe, when it comes
 * back after being down, and every `modelsRefreshMs` after that, the prober
 * also reads the engine's `/v1/models` (./engine-models.ts). An engine that
 * does not serve the worker's served model name is kept down (not routed
 * to) for as long as that lasts; the LoRA adapters it lists are recorded in
 * the registry. An engine whose list cannot be read keeps its health-probe
 * state (not every engine has the endpoint). `onModelCheck` hears every
 * change of outcome, so the caller logs and counts it.
 */
import { request } from 'undici';
import { checkEngineModels, type ModelCheck } from './engine-models.js';
import type { WorkerInfo, WorkerRegistry } from './registry.js';

export interface HealthProberOptions {
  /** Milliseconds between probe rounds (default 2000). */
  intervalMs?: number;
  /** Probe timeout in ms (default 1000). */
  timeoutMs?: number;
  /** Consecutive failures before a worker is marked down (default 2). */
  unhealthyAfter?: number;
  /** Check each engine's /v1/models against the served model name (default true). */
  checkModels?: boolean;
  /** Milliseconds between /v1/models checks of a worker that stays up (default 30000). */
  modelsRefreshMs?: number;
  /** Told when a worker's model check changes outcome (or adapters); `previous` is undefined the first time. */
  onModelCheck?: (worker: WorkerInfo, check: ModelCheck, previous: ModelCheck | undefined) => void;
  /** Milliseconds clock for the refresh period (default Date.now). */
  now?: () => number;
}

export class HealthProber {
  readonly #registry: WorkerRegistry;
  readonly #intervalMs: number;
  readonly #timeoutMs: number;
  readonly #unhealthyAfter: number;
  readonly #failures = new Map<number, number>();
  readonly #inFlight = new Set<number>();
  readonly #opts: HealthProberOptions;
  /** Last model-check outcome and when it was taken, per worker. */
  readonly #checks = new Map<number, { check: ModelCheck; at: number }>();
  #timer: NodeJS.Timeout | undefined;
  #closed = false;

  constructor(registry: WorkerRegistry, opts: HealthProberOptions = {}) {
    this.#registry = registry;
    this.#intervalMs = opts.intervalMs ?? 2000;
    this.#timeoutMs = opts.timeoutMs ?? 1000;
    this.#unhealthyAfter = opts.unhealthyAfter ?? 2;
    this.#opts = opts;
  }

  start(): void {
    if (this.#timer !== undefined || this.#closed) return;
    this.#timer = setInterval(() => void this.probeAll(), this.#intervalMs);
    this.#timer.unref();
  }

  close(): void {
    this.#closed = true;
    if (this.#timer !== undefined) clearInterval(this.#timer);
    this.#timer = undefined;
  }

  /** Probes every registered worker once; resolves when all probes are done. */
  async probeAll(): Promise<void> {
    await Promise.all(this.#registry.all().map((w) => this.probe(w.id)));
  }

  /** The dispatch path saw a connection failure: count it and probe now. */
  reportFailure(workerId: number): void {
    void this.probe(workerId);
  }

  /** Probes one worker; resolves to whether it answered 2xx. */
  async probe(workerId: number): Promise<boolean> {
    const w = this.#registry.get(workerId);
    if (w === undefined || this.#inFlight.has(workerId) || this.#closed) return this.#registry.isAvailable(workerId);
    this.#inFlight.add(workerId);
    let ok = false;
    try {
      const res = await request(new URL('/health', w.url), {
        method: 'GET',
        headersTimeout: this.#timeoutMs,
        bodyTimeout: this.#timeoutMs,
        signal: AbortSignal.timeout(this.#timeoutMs),
      });
      await res.body.dump();
      ok = res.statusCode >= 200 && res.statusCode < 300;
    } catch {
      ok = false;
    } finally {
      this.#inFlight.delete(workerId);
    }
    if (ok && (await this.#modelMismatch(w))) ok = false;
    if (this.#closed) return ok;
    if (ok) {
      this.#failures.delete(workerId);
      this.#registry.markUp(workerId);
    } else if (this.#checks.get(workerId)?.check.kind === 'mismatch') {
      this.#registry.markDown(workerId);
    } else {
      const n = (this.#failures.get(workerId) ?? 0) + 1;
      this.#failures.set(workerId, n);
      if (n >= this.#unhealthyAfter) this.#registry.markDown(workerId);
    }
    return ok;
  }

  /** Runs the model check when due (first answer, back from down, refresh period); true while the engine serves another model. */
  async #modelMismatch(w: WorkerInfo): Promise<boolean> {
    if (this.#opts.checkModels === false) return false;
    const now = (this.#opts.now ?? Date.now)();
    const last = this.#checks.get(w.id);
    const due = last === undefined || last.check.kind === 'mismatch' || !this.#registry.isAvailable(w.id)
      || now - last.at >= (this.#opts.modelsRefreshMs ?? 30_000);
    if (!due) return false;
    const check = await checkEngineModels(w, this.#timeoutMs);
    if (this.#closed) return check.kind === 'mismatch';
    this.#checks.set(w.id, { check, at: now });
    if (check.kind === 'ok') this.#registry.setDiscoveredAdapters(w.id, check.adapters);
    if (last === undefined || JSON.stringify(last.check) !== JSON.stringify(check)) this.#opts.onModelCheck?.(w, check, last?.check);
    return check.kind === 'mismatch';
  }
}
