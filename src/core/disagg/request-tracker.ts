/**
 * Per-request record shared by the prefill and decode legs:
 * write-once timestamps from an injected clock, worker attribution per phase,
 * and the phase with a one-slot permit.
 *
 * The permit is why disaggregation is safe: `setPhase` waits until the holder
 * of the previous phase releases its permit. The prefill leg releases it right
 * after its routing call returns (its worker is then attributed to the prefill
 * slot), never after prefill output: waiting for output would deadlock SGLang's
 * rendezvous, where prefill completes only once decode has connected.
 */
import type { Clock, TraceLink, WorkerPin, WorkerRole } from '../../common/index.js';

export interface WorkerAttribution {
  prefillWorkerId?: number;
  prefillDpRank?: number;
  decodeWorkerId?: number;
  decodeDpRank?: number;
}

/** A held phase; release it exactly once (later calls are no-ops). */
export interface PhasePermit {
  readonly phase: WorkerRole;
  release(): void;
}

export class RequestTracker {
  readonly #clock: Clock;
  #phase: WorkerRole = 'aggregated';
  #held = false;
  readonly #waiters: (() => void)[] = [];
  readonly #workers: WorkerAttribution = {};
  readonly times: {
    received: number;
    prefillStart?: number;
    firstToken?: number;
    decodeFirstToken?: number;
    prefillComplete?: number;
    finish?: number;
  };
  /** Conflicting attribution writes (kept for logs; the first write wins). */
  readonly conflicts: string[] = [];
  /** The prefill leg's span (Dynamo's `PrefillCompletion.worker_link`): the decode leg's span links to it. */
  #prefillLink: TraceLink | undefined;

  constructor(clock: Clock) {
    this.#clock = clock;
    this.times = { received: clock.now() };
  }

  get phase(): WorkerRole {
    return this.#phase;
  }

  /** Waits for the permit, sets the phase, and returns the permit. */
  async setPhase(phase: WorkerRole): Promise<PhasePermit> {
    while (this.#held) await new Promise<void>((resolve) => this.#waiters.push(resolve));
    this.#held = true;
    this.#phase = phase;
    let released = false;
    return {
      phase,
      release: () => {
        if (released) return;
        released = true;
        this.#held = false;
        this.#waiters.shift()?.();
      },
    };
  }

  /** Attributes a worker (and its rank, when known) to the slot of the current phase (both slots when aggregated). Write-once per slot. */
  recordWorker(worker: WorkerPin): void {
    const { workerId, dpRank } = worker;
    const write = (idKey: 'prefillWorkerId' | 'decodeWorkerId', rankKey: 'prefillDpRank' | 'decodeDpRank'): void => {
      const cur = this.#workers[idKey];
      if (cur !== undefined) {
        if (cur !== workerId) this.conflicts.push(`${idKey}: kept ${cur}, ignored ${workerId}`);
        return;
      }
      this.#workers[idKey] = workerId;
      if (dpRank !== undefined) this.#workers[rankKey] = dpRank;
    };
    if (this.#phase !== 'decode') write('prefillWorkerId', 'prefillDpRank');
    if (this.#phase !== 'prefill') write('decodeWorkerId', 'decodeDpRank');
  }

  workers(): Readonly<WorkerAttribution> {
    return { ...this.#workers };
  }

  /** The prefill leg's span, once (a retried prefill keeps the first attempt's). */
  recordPrefillLink(link: TraceLink): void {
    this.#prefillLink ??= link;
  }

  get prefillLink(): TraceLink | undefined {
    return this.#prefillLink;
  }

  recordPrefillStart(): void {
    this.times.prefillStart ??= this.#clock.now();
  }

  recordFirstToken(): void {
    this.times.firstToken ??= this.#clock.now();
    if (this.#phase === 'decode') this.times.decodeFirstToken ??= this.#clock.now();
  }

  recordPrefillComplete(): void {
    this.times.prefillComplete ??= this.#clock.now();
  }

  recordFinish(): void {
    this.times.finish = this.#clock.now();
  }

  /** ms from arrival to the first token, if any. */
  ttftMs(): number | undefined {
    return this.times.firstToken === undefined ? undefined : this.times.firstToken - this.times.received;
  }

  /** Decode first token minus prefill completion: the estimated KV transfer time. */
  kvTransferEstimatedMs(): number | undefined {
    const { decodeFirstToken, prefillComplete } = this.times;
    return decodeFirstToken === undefined || prefillComplete === undefined
      ? undefined
      : decodeFirstToken - prefillComplete;
  }
}
