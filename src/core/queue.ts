/**
 * The router queue: requests park here while every slot
 * they may use is prefill-busy, and leave in key order as load drains.
 *
 * Order: higher `strictPriority` tier first, then higher policy key, then
 * arrival (FIFO). Policy keys (higher = earlier):
 *   fcfs  priority_jump − arrival_offset_secs
 *   lcfs  priority_jump + arrival_offset_secs          (experiments only)
 *   wspt  (1 + priority_jump) / max(1, isl − cached_tokens)
 *
 * Lanes: requests that may use any slot share the main lane; requests pinned
 * to one slot (or to one worker's ranks) wait in a lane of their own, so a
 * pinned request waits only on its worker and never blocks the others. A
 * drain repeatedly admits the best head among lanes whose slots have room.
 *
 *   main lane   [a][b][c]      (any slot)
 *   lane s:4    [p]            (pinned to slot 4)
 *   drain: heads a and p; admissible(a) = some slot not busy; admissible(p) = slot 4 not busy
 *
 * Cancellation is lazy: a cancelled entry stays in its heap and is skipped.
 */
import { KvgateError } from '../errors/index.js';
import { BinaryHeap } from './binary-heap.js';
import type { QueueDepthTier, QueuePolicy } from './config.js';

/**
 * The most seconds a request's `priorityJump` may move it in the queue unless its router says otherwise (a
 * scheduler's `maxPriorityJump`), and a tenant class's `max_priority_jump` unless it sets one: under `fcfs` a request
 * may go ahead of those that arrived up to this long before it (so a request waits behind no jumper that arrived more
 * than this after it), under `wspt` it weighs at most 11 times another. Dynamo's documented hint is 10; router-queue
 * waits past 10 s are ones clients give up on, so it covers what the hint is for (an interactive turn ahead of queued
 * background work).
 */
export const DEFAULT_MAX_PRIORITY_JUMP = 10;

/** The largest bound on a priority jump either of them may set, in seconds (an hour). */
export const MAX_PRIORITY_JUMP_LIMIT = 3600;

/**
 * A scheduler's `maxPriorityJump`: the default when absent, else a number of seconds in [0, 3600].
 * @throws KvgateError KVG_ERR_INVALID_CONFIG naming `maxPriorityJump`.
 */
export function checkMaxPriorityJump(value: unknown): number {
  if (value === undefined) return DEFAULT_MAX_PRIORITY_JUMP;
  if (typeof value === 'number' && value >= 0 && value <= MAX_PRIORITY_JUMP_LIMIT) return value;
  const reason = `must be a number of seconds in [0, ${MAX_PRIORITY_JUMP_LIMIT}]`;
  const shown = typeof value === 'number' ? String(value) : (JSON.stringify(value) ?? String(value));
  throw new KvgateError('KVG_ERR_INVALID_CONFIG', `maxPriorityJump = ${shown}: ${reason}`, {
    field: 'maxPriorityJump',
    value: shown,
    reason,
  });
}

/** The ordering key of a queued request under a policy. */
export function queueKey(
  policy: QueuePolicy,
  priorityJump: number,
  arrivalOffsetSecs: number,
  isl: number,
  cachedTokens: number,
): number {
  switch (policy) {
    case 'fcfs':
      return priorityJump - arrivalOffsetSecs;
    case 'lcfs':
      return priorityJump + arrivalOffsetSecs;
    case 'wspt':
      return (1 + priorityJump) / Math.max(1, isl - cachedTokens);
  }
}

/**
 * The queued-ISL-token cap for a request missing `missingTokens` cache tokens:
 * the tier with the highest floor <= missing, times the worker count.
 */
export function backpressureCap(tiers: readonly QueueDepthTier[], missingTokens: number, workerCount: number): number {
  let cap = tiers[0]![1];
  for (const [floor, perWorker] of tiers) {
    if (floor <= missingTokens) cap = perWorker;
    else break;
  }
  return cap * workerCount;
}

/** One parked request. `T` is the caller's payload. */
export class QueueEntry<T> {
  cancelled = false;
  constructor(
    readonly payload: T,
    /** Lane: '' for the main lane, or a key naming the slots the request is pinned to. */
    readonly lane: string,
    readonly strictPriority: number,
    readonly key: number,
    readonly seqNo: number,
    readonly isl: number,
  ) {}
}

/** True if `a` leaves the queue before `b`. */
function before<T>(a: QueueEntry<T>, b: QueueEntry<T>): boolean {
  if (a.strictPriority !== b.strictPriority) return a.strictPriority > b.strictPriority;
  if (a.key !== b.key) return a.key > b.key;
  return a.seqNo < b.seqNo;
}

class Heap<T> extends BinaryHeap<QueueEntry<T>> {
  constructor() {
    super(before);
  }

  /** The first live entry, dropping cancelled heads. */
  peek(): QueueEntry<T> | undefined {
    while (this.items.length > 0 && this.items[0]!.cancelled) this.pop();
    return this.items[0];
  }
}

export class RequestQueue<T> {
  readonly #lanes = new Map<string, Heap<T>>();
  #seqNo = 0;
  #pending = 0;
  #pendingIsl = 0;

  /** Requests waiting (cancelled ones excluded). */
  get pendingRequests(): number {
    return this.#pending;
  }

  /** Sum of the ISL of waiting requests. */
  get pendingIslTokens(): number {
    return this.#pendingIsl;
  }

  /** Parks a request; returns its entry (for `cancel`). */
  push(payload: T, lane: string, strictPriority: number, key: number, isl: number): QueueEntry<T> {
    const e = new QueueEntry(payload, lane, strictPriority, key, this.#seqNo++, isl);
    let heap = this.#lanes.get(lane);
    if (heap === undefined) this.#lanes.set(lane, (heap = new Heap()));
    heap.push(e);
    this.#pending++;
    this.#pendingIsl += isl;
    return e;
  }

  /** Withdraws a waiting entry. Returns false if it already left the queue. */
  cancel(e: QueueEntry<T>): boolean {
    if (e.cancelled) return false;
    e.cancelled = true;
    this.#pending--;
    this.#pendingIsl -= e.isl;
    return true;
  }

  /**
   * Admits entries in key order while some lane's head is admissible: each
   * round takes the best admissible head over all lanes, removes it, and hands
   * it to `admit` (which books it, so the next round sees the new load).
   * Returns how many were admitted.
   */
  drain(admissible: (e: QueueEntry<T>) => boolean, admit: (e: QueueEntry<T>) => void): number {
    let admitted = 0;
    for (let e = this.take(admissible); e !== undefined; e = this.take(admissible)) {
      admit(e);
      admitted++;
    }
    return admitted;
  }

  /** Removes and returns the best admissible head over all lanes; undefined when no head is admissible. */
  take(admissible: (e: QueueEntry<T>) => boolean): QueueEntry<T> | undefined {
    let best: QueueEntry<T> | undefined;
    let bestHeap: Heap<T> | undefined;
    for (const [lane, heap] of this.#lanes) {
      const head = heap.peek();
      if (head === undefined) {
        this.#lanes.delete(lane);
        continue;
      }
      if ((best === undefined || before(head, best)) && admissible(head)) {
        best = head;
        bestHeap = heap;
      }
    }
    if (best === undefined) return undefined;
    bestHeap!.pop();
    best.cancelled = true;
    this.#pending--;
    this.#pendingIsl -= best.isl;
    return best;
  }

  /** The waiting entry that would leave last (the one to shed), by a scan: shedding is rare, admission is not. */
  last(): QueueEntry<T> | undefined {
    let worst: QueueEntry<T> | undefined;
    for (const heap of this.#lanes.values())
      for (const e of heap.items) if (!e.cancelled && (worst === undefined || before(worst, e))) worst = e;
    return worst;
  }
}
