/**
 * Active health checking: probes each worker's GET /health on an interval and
 * flips its availability in the registry after `unhealthyAfter` consecutive
 * failures (down) or one success (up). `reportFailure` lets the dispatch path
 * ask for an immediate probe when a connection fails, so a dead engine stops
 * receiving traffic within one probe round trip instead of one interval.
 */
import { request } from 'undici';
import type { WorkerRegistry } from './registry.js';

export interface HealthProberOptions {
  /** Milliseconds between probe rounds (default 2000). */
  intervalMs?: number;
  /** Probe timeout in ms (default 1000). */
  timeoutMs?: number;
  /** Consecutive failures before a worker is marked down (default 2). */
  unhealthyAfter?: number;
}

export class HealthProber {
  readonly #registry: WorkerRegistry;
  readonly #intervalMs: number;
  readonly #timeoutMs: number;
  readonly #unhealthyAfter: number;
  readonly #failures = new Map<number, number>();
  readonly #inFlight = new Set<number>();
  #timer: NodeJS.Timeout | undefined;
  #closed = false;

  constructor(registry: WorkerRegistry, opts: HealthProberOptions = {}) {
    this.#registry = registry;
    this.#intervalMs = opts.intervalMs ?? 2000;
    this.#timeoutMs = opts.timeoutMs ?? 1000;
    this.#unhealthyAfter = opts.unhealthyAfter ?? 2;
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
    if (this.#closed) return ok;
    if (ok) {
      this.#failures.delete(workerId);
      this.#registry.markUp(workerId);
    } else {
      const n = (this.#failures.get(workerId) ?? 0) + 1;
      this.#failures.set(workerId, n);
      if (n >= this.#unhealthyAfter) this.#registry.markDown(workerId);
    }
    return ok;
  }
}
