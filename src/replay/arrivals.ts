/**
 * When each request of a workload is sent, in virtual time: open-loop
 * requests at their `arrivalMs`, closed-loop ones (`after`) `pauseMs` after
 * the last of their dependencies ended (finished or failed: an agent goes on
 * after an error, and a stalled turn must not stall its session forever).
 *
 * Contract: `ended(index, at)` is called once per request, at a virtual time
 * no earlier than the last `popDue`; releases are ordered by (time, index), so
 * a seed gives the same sequence on every run.
 */
import type { ReplayRequest } from './workload.js';

interface Due {
  readonly at: number;
  readonly r: ReplayRequest;
}

export class ArrivalSchedule {
  readonly #requests: readonly ReplayRequest[];
  /** Next open-loop request (requests are in arrivalMs order). */
  #next = 0;
  /** Closed-loop requests released, sorted by (at, index). */
  readonly #due: Due[] = [];
  /** Per request: dependencies not yet ended. */
  readonly #waiting: Int32Array;
  /** Per request: the requests waiting on it. */
  readonly #dependents = new Map<number, number[]>();
  /** Per request: latest end among its dependencies. */
  readonly #latest: Float64Array;

  constructor(requests: readonly ReplayRequest[]) {
    this.#requests = requests;
    this.#waiting = new Int32Array(requests.length);
    this.#latest = new Float64Array(requests.length);
    for (const r of requests) {
      if (r.after === undefined) continue;
      this.#waiting[r.index] = r.after.requests.length;
      for (const d of r.after.requests) {
        const list = this.#dependents.get(d);
        if (list === undefined) this.#dependents.set(d, [r.index]);
        else list.push(r.index);
      }
    }
    this.#skipClosedLoop();
  }

  #skipClosedLoop(): void {
    while (this.#next < this.#requests.length && this.#requests[this.#next]!.after !== undefined) this.#next++;
  }

  /** Virtual time of the next send, or Infinity when none is known yet. */
  nextTime(): number {
    const open = this.#next < this.#requests.length ? this.#requests[this.#next]!.arrivalMs : Infinity;
    const closed = this.#due.length > 0 ? this.#due[0]!.at : Infinity;
    return Math.min(open, closed);
  }

  /** Removes and returns the next request due by `t` (with its send time), or undefined. */
  popDue(t: number): Due | undefined {
    const open = this.#next < this.#requests.length ? this.#requests[this.#next]! : undefined;
    const closed = this.#due[0];
    const openFirst =
      open !== undefined && open.arrivalMs <= t && (closed === undefined || open.arrivalMs <= closed.at);
    if (openFirst) {
      this.#next++;
      this.#skipClosedLoop();
      return { at: open.arrivalMs, r: open };
    }
    if (closed !== undefined && closed.at <= t) return this.#due.shift();
    return undefined;
  }

  /** Request `index` ended at `at`: releases the requests whose last dependency it was. */
  ended(index: number, at: number): void {
    for (const d of this.#dependents.get(index) ?? []) {
      this.#latest[d] = Math.max(this.#latest[d]!, at);
      if (--this.#waiting[d]! > 0) continue;
      const r = this.#requests[d]!;
      this.#insert({ at: this.#latest[d]! + r.after!.pauseMs, r });
    }
  }

  #insert(x: Due): void {
    const q = this.#due;
    let lo = 0;
    let hi = q.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      const m = q[mid]!;
      if (m.at < x.at || (m.at === x.at && m.r.index < x.r.index)) lo = mid + 1;
      else hi = mid;
    }
    q.splice(lo, 0, x);
  }
}
