/**
 * VirtualEngine: an EngineCore on a virtual clock, for offline replay. Nothing
 * sleeps; time jumps from event to event.
 *
 * Timeline of one engine: a step started at t with duration d is "in flight";
 * its tokens, finishes and KV events are delivered at t + d, and the next step
 * starts then, with every request that arrived meanwhile. When a step
 * schedules nothing (everything waits on a KV transfer or a lease), the engine
 * sleeps until `core.nextWakeTime()` or the next arrival.
 *
 * Driving several engines on one clock (e.g. a router replaying a trace):
 *
 *   while (true) {
 *     const t = min(nextArrival, ...engines.map(e => e.nextEventTime() ?? Infinity));
 *     if (t === Infinity) break;
 *     for (const e of engines) e.runUntil(t);        // delivers steps ending at <= t
 *     for (const req of arrivalsAt(t)) pick(engines).submit(req, t);
 *   }
 *
 * `onStep` sees each step's result (KV events included) at its completion
 * time, which is when a router should apply those events.
 */
import type { EngineCore } from './engine.js';
import type { CoreRequest, FinishedRequest, StepResult } from './engine-types.js';

export interface VirtualRequestListener {
  onAdmitted?(cachedTokens: number, at: number): void;
  onToken?(tokenId: number, index: number, at: number): void;
  onFinish?(info: FinishedRequest, at: number): void;
  /** The core rejected the request (e.g. it can never fit). */
  onError?(err: unknown, at: number): void;
}

/** What happened to one request, in virtual ms. */
export interface VirtualRequestRecord {
  id: string;
  arrivalMs: number;
  admittedMs: number | undefined;
  firstTokenMs: number | undefined;
  finishedMs: number | undefined;
  promptTokens: number;
  outputTokens: number;
  cachedTokens: number;
  error: unknown;
}

interface Arrival {
  at: number;
  req: CoreRequest;
  listener: VirtualRequestListener | undefined;
}

export interface VirtualEngineOptions {
  /** Virtual start time, ms (default 0). */
  startMs?: number;
  /** Called with each step result at its completion time (KV events, outputs). */
  onStep?: (result: StepResult, completedAt: number) => void;
  /** Keep a record per request (default true); turn off for very long replays. */
  keepRecords?: boolean;
}

export class VirtualEngine {
  readonly core: EngineCore;
  #now: number;
  #arrivals: Arrival[] = [];
  #inFlight: StepResult | undefined;
  #busyUntil = 0;
  /** The last step scheduled nothing; only a wake time or new input can change that. */
  #stalled = false;
  readonly #listeners = new Map<string, VirtualRequestListener>();
  readonly #records = new Map<string, VirtualRequestRecord>();
  readonly #onStep: VirtualEngineOptions['onStep'];
  readonly #keepRecords: boolean;

  constructor(core: EngineCore, opts: VirtualEngineOptions = {}) {
    this.core = core;
    this.#now = opts.startMs ?? 0;
    this.#onStep = opts.onStep;
    this.#keepRecords = opts.keepRecords ?? true;
  }

  get now(): number {
    return this.#now;
  }

  /** Queues a request arriving at `at` (default now; never in the past). */
  submit(req: CoreRequest, at: number = this.#now, listener?: VirtualRequestListener): void {
    const t = Math.max(at, this.#now);
    const a: Arrival = { at: t, req, listener };
    // Arrivals are usually in order: insert from the back.
    let i = this.#arrivals.length;
    while (i > 0 && this.#arrivals[i - 1]!.at > t) i--;
    this.#arrivals.splice(i, 0, a);
  }

  /** Aborts a queued, running or not-yet-arrived request. */
  abort(id: string): boolean {
    const i = this.#arrivals.findIndex((a) => a.req.id === id);
    if (i >= 0) {
      this.#arrivals.splice(i, 1);
      return true;
    }
    this.#listeners.delete(id);
    this.#stalled = false;
    return this.core.abort(id);
  }

  /** When the next thing happens (arrival, step completion, step start, wake-up); undefined when idle for good. */
  nextEventTime(): number | undefined {
    let t = Infinity;
    if (this.#inFlight !== undefined) t = this.#busyUntil;
    else if (!this.core.isIdle()) {
      if (!this.#stalled) t = this.#now;
      else t = Math.min(t, this.core.nextWakeTime() ?? Infinity);
    }
    if (this.#arrivals.length > 0) t = Math.min(t, this.#arrivals[0]!.at);
    return t === Infinity ? undefined : Math.max(t, this.#now);
  }

  /** Processes the next event; false when there is none. */
  advance(): boolean {
    const t = this.nextEventTime();
    if (t === undefined) return false;
    this.#now = t;
    if (this.#inFlight !== undefined && this.#busyUntil <= t) {
      const r = this.#inFlight;
      this.#inFlight = undefined;
      this.#deliver(r, t);
      return true;
    }
    while (this.#arrivals.length > 0 && this.#arrivals[0]!.at <= t) this.#admit(this.#arrivals.shift()!);
    if (this.#inFlight === undefined && !this.core.isIdle()) {
      const r = this.core.step(t);
      if (r.scheduledTokens > 0) {
        this.#inFlight = r;
        this.#busyUntil = t + r.durationMs;
        this.#stalled = false;
      } else {
        this.#stalled = true;
        this.#deliver(r, t);
      }
    }
    return true;
  }

  /** Processes every event up to and including `t`, then sets the clock to `t`. */
  runUntil(t: number): void {
    for (let next = this.nextEventTime(); next !== undefined && next <= t; next = this.nextEventTime()) this.advance();
    this.#now = Math.max(this.#now, t);
  }

  /** Runs until nothing is left to do; returns the final virtual time. */
  runUntilIdle(): number {
    while (this.advance());
    return this.#now;
  }

  record(id: string): VirtualRequestRecord | undefined {
    return this.#records.get(id);
  }

  records(): IterableIterator<VirtualRequestRecord> {
    return this.#records.values();
  }

  #admit(a: Arrival): void {
    const rec: VirtualRequestRecord = {
      id: a.req.id,
      arrivalMs: a.at,
      admittedMs: undefined,
      firstTokenMs: undefined,
      finishedMs: undefined,
      promptTokens: a.req.promptTokens.length,
      outputTokens: 0,
      cachedTokens: 0,
      error: undefined,
    };
    if (this.#keepRecords) this.#records.set(a.req.id, rec);
    try {
      this.core.add(a.req, a.at);
    } catch (err) {
      rec.error = err;
      a.listener?.onError?.(err, a.at);
      return;
    }
    this.#stalled = false;
    if (a.listener !== undefined) this.#listeners.set(a.req.id, a.listener);
  }

  #deliver(r: StepResult, at: number): void {
    for (const a of r.admitted) {
      const rec = this.#records.get(a.requestId);
      if (rec !== undefined) {
        rec.admittedMs = r.startedAt;
        rec.cachedTokens = a.cachedTokens;
      }
      this.#listeners.get(a.requestId)?.onAdmitted?.(a.cachedTokens, r.startedAt);
    }
    for (const o of r.outputs) {
      const rec = this.#records.get(o.requestId);
      if (rec !== undefined) {
        rec.outputTokens = o.index + 1;
        if (o.index === 0) rec.firstTokenMs = at;
      }
      this.#listeners.get(o.requestId)?.onToken?.(o.tokenId, o.index, at);
    }
    for (const f of r.finished) {
      const rec = this.#records.get(f.requestId);
      if (rec !== undefined) rec.finishedMs = at;
      this.#listeners.get(f.requestId)?.onFinish?.(f, at);
      this.#listeners.delete(f.requestId);
    }
    this.#onStep?.(r, at);
  }
}
