/**
 * Run-time fault state of one mocker worker. Settings change through
 * `update` (the admin endpoint or the in-process handle); every draw that
 * depends on a rate uses a seeded RNG, so a test with a fixed seed sees the
 * same failures every run.
 */
import { seededRng, type Rng } from '../common/index.js';
import { resolveFaults, type FaultSettings } from './options.js';

export class FaultController {
  #settings: FaultSettings;
  readonly #requestRng: Rng;
  readonly #eventRng: Rng;
  readonly #listeners = new Set<(s: Readonly<FaultSettings>) => void>();
  #unhang: (() => void)[] = [];

  constructor(initial: Readonly<FaultSettings>, seed: number) {
    this.#settings = { ...initial };
    this.#requestRng = seededRng(seed ^ 0x5eed_fa17);
    this.#eventRng = seededRng(seed ^ 0x0e7e_4175);
  }

  get settings(): Readonly<FaultSettings> {
    return { ...this.#settings };
  }

  /**
   * Merges and validates new settings; listeners run after the change.
   * @throws KvgateError KVG_ERR_INVALID_CONFIG for an unknown fault or a bad value.
   */
  update(partial: Partial<FaultSettings>): Readonly<FaultSettings> {
    this.#settings = resolveFaults(partial, this.#settings);
    if (!this.#settings.hang) {
      const waiters = this.#unhang;
      this.#unhang = [];
      for (const w of waiters) w();
    }
    const snapshot = this.settings;
    for (const l of this.#listeners) l(snapshot);
    return snapshot;
  }

  onChange(listener: (s: Readonly<FaultSettings>) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /** Resolves at once when not hung, else when the hang is lifted. */
  whenNotHung(): Promise<void> {
    if (!this.#settings.hang) return Promise.resolve();
    return new Promise((resolve) => this.#unhang.push(resolve));
  }

  /** Should this completion request fail with an injected 500? */
  shouldFailRequest(): boolean {
    const rate = this.#settings.errorRate;
    return rate > 0 && this.#requestRng() < rate;
  }

  /** The garbage flood asked for (then cleared: each request floods once). */
  takeGarbageFlood(): number {
    const n = this.#settings.garbageEventFlood;
    this.#settings.garbageEventFlood = 0;
    return n;
  }

  /** A uniformly random u64 sequence number (seeded). */
  randomSeq(): bigint {
    const hi = BigInt(Math.floor(this.#eventRng() * 2 ** 32));
    const lo = BigInt(Math.floor(this.#eventRng() * 2 ** 32));
    return (hi << 32n) | lo;
  }

  /** Should this KV-event batch be dropped? Consumes `dropNextEventBatches` first. */
  shouldDropEventBatch(): boolean {
    if (this.#settings.dropNextEventBatches > 0) {
      this.#settings.dropNextEventBatches--;
      return true;
    }
    const rate = this.#settings.dropEventRate;
    return rate > 0 && this.#eventRng() < rate;
  }
}
