/**
 * The router's own account of every slot's load: which requests are in flight on each (worker, dp_rank) slot, their
 * uncached prompt tokens until prefill completes, and the KV blocks they occupy.
 *
 * Ownership: this table is authoritative for load (the prefix index is only advisory). Slots are the scheduler's dense
 * ids; callers register them with `ensureSlot` and every per-slot figure is readable at any time, in O(1).
 *
 * Blocks. The prompts of in-flight requests live in one `ActivePromptTrie` (a radix tree over chained block hashes with
 * per-slot counts, in the WASM module), so an in-flight prefix shared by several requests on a slot counts once there,
 * a new request learns in one walk how many of its blocks each slot already holds (`depthsInto`, for Dynamo's
 * new_blocks), a booking right after that match resumes its walk, and booking or freeing costs one step per branch
 * point on the prompt's path, not O(blocks).
 *
 * Requests admitted with `assume_kv_reuse = false` hold private blocks (counted, never shared), as do output blocks.
 * `addOutputBlock(id, decay)` marks every block only this request holds as fractional with weight `decay`; a slot's
 * active decode blocks are `round(unique blocks - Σ over fractional (1 - weight))`. A request's fractional set is
 * re-counted at each decayed output block (a block another request starts sharing stays fractional until then, as in
 * Dynamo).
 *
 * Expiry: a request never freed is force-freed `expiryMs` after it started: when it was added, or the `startedAt` it
 * was booked again with (checked at most every 30 s on add, and on every `expire()`). `expire()` returns the ids it
 * freed; those freed by the check on add go to `onExpired`, so whoever reports expiries hears of both.
 */
import { KvgateError } from '../errors/index.js';
import { ActivePromptTrie, type PrefixIndex, type TrieNode } from '../wasm/index.js';
import type { Clock } from '../common/index.js';
import { PrefillDecay } from './prefill-decay.js';
import {
  ActiveRequest,
  PEER_ID_PREFIX,
  type ActiveRequestInfo,
  type BookingInput,
  type SlotLoad,
  type SyncedBooking,
} from './active-request.js';

/** Expiry is checked on add at most this often (Dynamo: 30 s). */
const EXPIRY_CHECK_INTERVAL_MS = 30_000;

export class ActiveSequences {
  readonly #clock: Clock;
  readonly #expiryMs: number;
  readonly #trie = new ActivePromptTrie();
  readonly #requests = new Map<string, ActiveRequest>();
  /** Requests booked with a `startedAt` before now: out of start order in `#requests` (expiry then reads them all). */
  readonly #early = new Set<ActiveRequest>();
  /** Requests whose id starts with `PEER_ID_PREFIX`. */
  #peerRequests = 0;
  #lastExpiryCheck: number;
  /** Mean ms a local request stayed in flight (EWMA over frees; 0 until one is freed). */
  #meanServiceMs = 0;

  // Per scheduler slot (grown on demand).
  #cap = 0;
  #registered = new Uint8Array(0);
  #workerId = new Float64Array(0);
  #dpRank = new Int32Array(0);
  #prefill = new Float64Array(0);
  #shared = new Float64Array(0);
  #private = new Float64Array(0);
  #deficit = new Float64Array(0);
  #blocks = new Float64Array(0);
  #count = new Float64Array(0);

  /** Hears of the requests force-freed by the expiry check an `add` makes (`expire()` returns its own). */
  readonly #onExpired: ((ids: readonly string[]) => void) | undefined;
  /** The prefill load model's state (`prefillDecay`), and the per-slot loads it gives (`prefillTokensNow`). */
  readonly #decay: PrefillDecay | undefined;
  #prefillNow = new Float64Array(0);

  /** `prefillDecay`: a slot's prefill load shrinks while it computes it (prefill-decay.ts; `prefillTokensNow`). */
  constructor(opts: {
    clock: Clock;
    expiryMs?: number;
    onExpired?: (ids: readonly string[]) => void;
    prefillDecay?: boolean;
  }) {
    this.#clock = opts.clock;
    this.#onExpired = opts.onExpired;
    this.#decay = opts.prefillDecay === true ? new PrefillDecay() : undefined;
    this.#expiryMs = opts.expiryMs ?? 300_000;
    if (!(this.#expiryMs > 0))
      throw new KvgateError('KVG_ERR_INVALID_ARGUMENT', `ActiveSequences: expiryMs must be > 0, got ${this.#expiryMs}`);
    this.#lastExpiryCheck = this.#clock.now();
  }

  /** Per-slot arrays, indexed by scheduler slot. Re-read after `ensureSlot` (they grow). Do not write. */
  get activePrefillTokens(): Float64Array {
    return this.#prefill;
  }
  get activeDecodeBlocks(): Float64Array {
    return this.#blocks;
  }
  get activeRequests(): Float64Array {
    return this.#count;
  }

  /**
   * The prefill load now of the slots `slots[0..n)`: `activePrefillTokens` itself (the booked tokens), or with the
   * prefill decay model a scratch array holding, for those slots, the load it gives (its other entries stale; valid
   * until the next call).
   */
  prefillTokensNow(slots: Int32Array, n: number): Float64Array {
    const decay = this.#decay;
    if (decay === undefined) return this.#prefill;
    const now = this.#clock.now();
    const out = this.#prefillNow;
    for (let i = 0; i < n; i++) {
      const s = slots[i]!;
      out[s] = decay.tokens(s, this.#prefill[s]!, now);
    }
    return out;
  }

  /** Requests in flight over all slots. */
  get size(): number {
    return this.#requests.size;
  }

  /** Requests in flight booked by this router (not by its replica peers). */
  get localSize(): number {
    return this.#requests.size - this.#peerRequests;
  }

  /** This router's own in-flight requests with their shared prompt hashes, oldest first (a replica sync snapshot). */
  *localBookings(): IterableIterator<SyncedBooking> {
    for (const r of this.#requests.values()) {
      if (r.id.startsWith(PEER_ID_PREFIX)) continue;
      yield {
        requestId: r.id,
        workerId: this.#workerId[r.slot]!,
        dpRank: this.#dpRank[r.slot]!,
        seq: r.seq,
        privateBlocks: r.privateBlocks,
        prefillTokens: r.prefillTokens,
        expectedOutputTokens: r.expectedOutputTokens,
        prefillCompleted: r.prefillCompleted,
        outputBlocks: r.outputBlocks,
        decay: r.fracBlocks > 0 || r.frac < 1 ? r.frac : undefined,
      };
    }
  }

  /**
   * Registers slot `slot` as (workerId, dpRank). Idempotent.
   * @rank-numbers the slot table registers a worker's ranks from a loop over rank numbers, into per-slot number columns.
   */
  ensureSlot(slot: number, workerId: number, dpRank: number): void {
    if (slot >= this.#cap) this.#grow(Math.max(slot + 1, this.#cap * 2, 16));
    if (this.#registered[slot] === 1) return;
    this.#registered[slot] = 1;
    this.#workerId[slot] = workerId;
    this.#dpRank[slot] = dpRank;
  }

  /** Forgets a slot and every request on it (their later `free` is a no-op). Returns the ids dropped. */
  removeSlot(slot: number): string[] {
    if (slot >= this.#cap || this.#registered[slot] !== 1) return [];
    const dropped: ActiveRequest[] = [];
    for (const r of this.#requests.values()) if (r.slot === slot) dropped.push(r);
    for (const r of dropped) this.#drop(r, false);
    this.#registered[slot] = 0;
    this.#decay?.removeSlot(slot);
    this.#prefill[slot] = 0;
    this.#shared[slot] = 0;
    this.#private[slot] = 0;
    this.#deficit[slot] = 0;
    this.#blocks[slot] = 0;
    this.#count[slot] = 0;
    return dropped.map((r) => r.id);
  }

  /** Load of one slot. */
  load(slot: number): SlotLoad {
    return {
      activePrefillTokens: this.#prefill[slot] ?? 0,
      activeDecodeBlocks: this.#blocks[slot] ?? 0,
      activeRequests: this.#count[slot] ?? 0,
    };
  }

  /** Distinct shared prompt blocks active on a slot (before output blocks and decay). */
  sharedBlocks(slot: number): number {
    return this.#shared[slot] ?? 0;
  }

  /** Snapshot of one request, or undefined if it is not in flight. */
  request(requestId: string): ActiveRequestInfo | undefined {
    const r = this.#requests.get(requestId);
    if (r === undefined) return undefined;
    return {
      requestId: r.id,
      slot: r.slot,
      promptBlocks: (r.seq?.length ?? 0) + r.privateBlocks,
      prefillTokens: r.prefillTokens,
      prefillCompleted: r.prefillCompleted,
      outputBlocks: r.outputBlocks,
      expectedOutputTokens: r.expectedOutputTokens,
      startedAt: r.startedAt,
    };
  }

  has(requestId: string): boolean {
    return this.#requests.has(requestId);
  }

  /**
   * For every slot holding a prefix of `seq` among its active blocks, writes that depth to `out[slot]` (other entries
   * are left untouched: zero them first). One trie walk.
   */
  depthsInto(seq: BigUint64Array, out: Float64Array): void {
    this.#trie.depthsInto(seq, out);
  }

  /**
   * A decision's match stage in one module call: `index`'s depths of `seq` into `dev` and this bookkeeping's
   * (as `depthsInto`) into `depth`, each only for the slots holding a prefix (`PrefixIndex.matchStage`).
   */
  matchInto(index: PrefixIndex, seq: BigUint64Array, dev: Float64Array, depth: Float64Array): void {
    index.matchStage(this.#trie, seq, dev, depth);
  }

  /**
   * Books a request on a slot.
   * @throws KvgateError KVG_ERR_DUPLICATE_REQUEST if the id is in flight; KVG_ERR_INVALID_ARGUMENT for an unregistered slot.
   */
  add(input: BookingInput): void {
    const now = this.#clock.now();
    if (now - this.#lastExpiryCheck >= EXPIRY_CHECK_INTERVAL_MS) {
      const expired = this.expire();
      if (expired.length > 0) this.#onExpired?.(expired);
    }
    const { requestId, slot } = input;
    if (this.#requests.has(requestId)) {
      throw new KvgateError('KVG_ERR_DUPLICATE_REQUEST', `request ${requestId} is already in flight`, { requestId });
    }
    if (!(slot < this.#cap && this.#registered[slot] === 1)) {
      throw new KvgateError('KVG_ERR_INVALID_ARGUMENT', `slot ${slot} is not registered`, { slot });
    }
    const seq = input.hashes !== null && input.hashes.seq.length > 0 ? input.hashes.seq : null;
    const privateBlocks = input.privateBlocks ?? 0;
    const prefill = input.prefillTokens > 0 ? input.prefillTokens : 0;
    let end: TrieNode | null = null;
    if (seq !== null) {
      this.#shared[slot]! += seq.length - this.#trie.insert(seq, slot);
      end = this.#trie.lastEnd;
    }
    const start = input.startedAt ?? now;
    const r = new ActiveRequest(requestId, slot, seq, end, privateBlocks, prefill, input.expectedOutputTokens, start);
    this.#requests.set(requestId, r);
    this.#decay?.added(slot, r, now);
    if (start < now) this.#early.add(r);
    if (requestId.startsWith(PEER_ID_PREFIX)) this.#peerRequests++;
    this.#private[slot]! += privateBlocks;
    this.#prefill[slot]! += prefill;
    this.#count[slot]! += 1;
    this.#refresh(slot);
  }

  /** Removes the request's prompt-token load (its blocks stay). Returns false if unknown or already completed. */
  markPrefillCompleted(requestId: string): boolean {
    const r = this.#requests.get(requestId);
    if (r === undefined || r.prefillCompleted) return false;
    r.prefillCompleted = true;
    this.#decay?.ended(r.slot, r, this.#clock.now(), true);
    this.#prefill[r.slot]! -= r.prefillTokens;
    if (this.#prefill[r.slot]! < 1e-9) this.#prefill[r.slot] = 0;
    r.prefillTokens = 0;
    return true;
  }

  /**
   * Adds one generated block to the request. With `decay` (in [0, 1], from
   * `outputBlockDecay`), every block only this request holds becomes
   * fractional with that weight. Returns false if the request is unknown.
   * @throws KvgateError KVG_ERR_INVALID_ARGUMENT if decay is outside [0, 1].
   */
  addOutputBlock(requestId: string, decay?: number): boolean {
    return this.addOutputBlocks(requestId, 1, decay);
  }

  /**
   * Adds `n` generated blocks in one step, each with the same `decay`: the state `n` calls of
   * `addOutputBlock(requestId, decay)` leave, in O(1) plus one trie walk (a peer replica's output
   * progress arrives as a count, up to 2^20 blocks). Exact: no block changes hands in between,
   * so each decayed block replaces the previous one's fractional set, and only the last one's stays.
   * @throws KvgateError KVG_ERR_INVALID_ARGUMENT if decay is outside [0, 1] or n is not a count.
   */
  addOutputBlocks(requestId: string, n: number, decay?: number): boolean {
    if (!Number.isSafeInteger(n) || n < 0)
      throw new KvgateError('KVG_ERR_INVALID_ARGUMENT', `output blocks added must be a count, got ${n}`, { n });
    if (decay !== undefined && !(decay >= 0 && decay <= 1)) {
      throw new KvgateError('KVG_ERR_INVALID_ARGUMENT', `output block decay must be in [0, 1], got ${decay}`, {
        decay,
      });
    }
    const r = this.#requests.get(requestId);
    if (r === undefined) return false;
    if (n === 0) return true;
    const slot = r.slot;
    r.outputBlocks += n;
    this.#private[slot]! += n;
    if (decay !== undefined) {
      const exclusive = this.#exclusiveBlocks(r);
      this.#deficit[slot]! += exclusive * (1 - decay) - r.fracBlocks * (1 - r.frac);
      r.frac = decay;
      r.fracBlocks = exclusive;
    }
    this.#refresh(slot);
    return true;
  }

  /**
   * Frees a request: its prefill load, and every block no other request holds. With `ownerSlot`, frees only if the
   * request is booked on that slot (a retried request may have been re-booked elsewhere under the same id).
   * Returns false if not in flight (or owned by another slot).
   */
  free(requestId: string, ownerSlot?: number): boolean {
    const r = this.#requests.get(requestId);
    if (r === undefined || (ownerSlot !== undefined && r.slot !== ownerSlot)) return false;
    this.#drop(r, true);
    return true;
  }

  /** Takes `r` out. `served`: it ended (its time in flight a service sample); not a slot's removal or an expiry. */
  #drop(r: ActiveRequest, served: boolean): void {
    const requestId = r.id;
    this.#requests.delete(requestId);
    if (this.#early.size > 0) this.#early.delete(r);
    if (requestId.startsWith(PEER_ID_PREFIX)) this.#peerRequests--;
    else if (served) this.#recordService(this.#clock.now() - r.startedAt);
    const slot = r.slot;
    if (!r.prefillCompleted) this.#decay?.ended(slot, r, this.#clock.now(), false);
    if (r.seq !== null) this.#shared[slot]! -= r.seq.length - this.#trie.removeAt(r.end!, slot);
    this.#private[slot]! -= r.privateBlocks + r.outputBlocks;
    this.#deficit[slot]! -= r.fracBlocks * (1 - r.frac);
    this.#prefill[slot]! -= r.prefillTokens;
    this.#count[slot]! -= 1;
    if (this.#count[slot] === 0) {
      // Exact zero: no float residue once a slot is idle.
      this.#prefill[slot] = 0;
      this.#deficit[slot] = 0;
      this.#private[slot] = 0;
    } else if (this.#prefill[slot]! < 1e-9) {
      this.#prefill[slot] = 0;
    }
    this.#refresh(slot);
  }

  /**
   * Mean ms a request stays in flight (booking to free), an exponential moving average over the
   * last ~64 frees of local requests (0 until one is freed): the time-unit cost's service time.
   */
  get meanServiceMs(): number {
    return this.#meanServiceMs;
  }

  #recordService(ms: number): void {
    if (!(ms >= 0)) return;
    this.#meanServiceMs = this.#meanServiceMs === 0 ? ms : this.#meanServiceMs + (ms - this.#meanServiceMs) / 64;
  }

  /** Force-frees requests added at least `expiryMs` ago. Returns the ids freed. */
  expire(): string[] {
    const now = this.#clock.now();
    this.#lastExpiryCheck = now;
    const cutoff = now - this.#expiryMs;
    const expired: ActiveRequest[] = [];
    // Insertion order is start order (a monotonic clock), unless one was booked with an earlier start: all are read.
    for (const r of this.#requests.values()) {
      if (r.startedAt <= cutoff) expired.push(r);
      else if (this.#early.size === 0) break;
    }
    for (const r of expired) this.#drop(r, false);
    return expired.map((r) => r.id);
  }

  /** Blocks only `r` holds: prompt blocks past its longest prefix shared with others, private and output blocks. */
  #exclusiveBlocks(r: ActiveRequest): number {
    let shared = 0;
    if (r.seq !== null) shared = r.seq.length - this.#trie.heldByOthers(r.seq, r.slot);
    return shared + r.privateBlocks + r.outputBlocks;
  }

  #refresh(slot: number): void {
    const v = this.#shared[slot]! + this.#private[slot]! - this.#deficit[slot]!;
    this.#blocks[slot] = v > 0 ? Math.round(v) : 0;
  }

  #grow(cap: number): void {
    const f64 = (a: Float64Array): Float64Array<ArrayBuffer> => {
      const b = new Float64Array(cap);
      b.set(a);
      return b;
    };
    const reg = new Uint8Array(cap);
    reg.set(this.#registered);
    this.#registered = reg;
    const dp = new Int32Array(cap);
    dp.set(this.#dpRank);
    this.#dpRank = dp;
    this.#workerId = f64(this.#workerId);
    this.#prefill = f64(this.#prefill);
    this.#shared = f64(this.#shared);
    this.#private = f64(this.#private);
    this.#deficit = f64(this.#deficit);
    this.#blocks = f64(this.#blocks);
    this.#count = f64(this.#count);
    if (this.#decay !== undefined) this.#prefillNow = new Float64Array(cap);
    this.#cap = cap;
  }
}

/** Dynamo's output-block decay: `max(0, 1 - osl / expected_osl)`, or undefined without an OSL hint. */
export function outputBlockDecay(outputTokens: number, expectedOutputTokens: number | undefined): number | undefined {
  if (expectedOutputTokens === undefined || !(expectedOutputTokens > 0)) return undefined;
  return Math.max(0, 1 - outputTokens / expectedOutputTokens);
}
