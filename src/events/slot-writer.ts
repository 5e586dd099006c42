/**
 * The write side of one slot's stream: decodes an accepted batch and applies
 * its events to the index a slice at a time (a large batch may span several
 * event-loop turns), clears the slot on a reset, and reports decode errors.
 * The stream decides what is accepted; this only writes it.
 */
import type { WorkerRank } from '../common/index.js';
import { PackedRun, PackedStop, type PackedSource } from '../wasm/index.js';
import { decodeKvEventBatch, type DecodeOptions } from './decode.js';
import { isAppliedStatus, packedStatus, packedType, type ApplyStatus, type KvEventApplier } from './applier.js';
import type { EventLiveness } from './liveness.js';
import type { ThrottledLog } from './log.js';
import type { IngestContext } from './options.js';
import { PackedBatch, PackedEvent } from './packed-batch.js';
import type { BatchOrigin, KvEventHooks, ResetReason } from './stats.js';
import type { TurnBudget } from './turn-scheduler.js';
import { isUnknownKind, type KvCacheEventType, type KvEventBatch, type KvEventDecodeError } from './types.js';

/** Events applied per call to the applier: the granularity at which the turn's time is checked. */
const APPLY_SLICE = 64;

/** The words of a packed run (one record per writer, refilled for each run). */
class RunSource implements PackedSource {
  u32: Uint32Array = new Uint32Array(0);
  from = 0;
  end = 0;
  maxEvents = 0;
  constructor(
    readonly group: number,
    readonly blockSize: number,
  ) {}
}

/** The batch being applied: how far it got (`next` events; for a packed batch, `word` is where the next one starts). */
interface Current {
  readonly batch: KvEventBatch;
  readonly origin: BatchOrigin;
  /** Events in the batch. */
  readonly count: number;
  next: number;
  word: number;
  applied: number;
  /** The removals of a refused batch (`#refuse`): counted as salvaged, and no sign that the slot's events flow. */
  readonly salvage: boolean;
}

/**
 * The resets a freshly seeded slot answers by keeping the snapshot's blocks (see `seeded`): those after which the
 * stream goes on from live events, the batches since the snapshot lost. `apply_failed` is one of them. While the
 * slot is seeded no batch has been accepted (`accept` clears the flag before it touches the index), so such a
 * throw came from judging or recovery, not from writing the slot: its blocks are still exactly the snapshot's,
 * and the stream starts fresh from the next live batch as after a failed replay, so clearing them would only
 * start the slot cold. (Counted as `replay_failed` before it had its own reason, it kept them then too.)
 * Not `restart` (the engine's cache started over) nor `inconsistent` (the slot restores from the engine's buffer).
 */
const KEEPS_SEED: ReadonlySet<ResetReason> = new Set<ResetReason>([
  'gap_without_replay',
  'replay_incomplete',
  'replay_failed',
  'apply_failed',
]);

export class SlotWriter {
  readonly #slot: WorkerRank;
  readonly #applier: KvEventApplier;
  readonly #hooks: KvEventHooks;
  readonly #liveness: EventLiveness | undefined;
  readonly #log: ThrottledLog;
  readonly #onStatus: ((type: KvCacheEventType, status: ApplyStatus) => void) | undefined;
  #current: Current | undefined;
  /** The record each event of a handed-over batch is read into. */
  readonly #read = new PackedEvent();
  /** A packed run's words and its outcomes (see `#applyPacked`). */
  readonly #source: RunSource;
  readonly #run = new PackedRun();
  /** The slot holds a replica snapshot's blocks and no batch was accepted since (see `seeded`). */
  #seeded = false;
  /** An event of an unknown kind was skipped and logged since the engine last restarted (`#skipUnknown`). */
  #unknownEpisode = false;
  /** How the slot's payloads are decoded (the model's Eagle hashing, the batch's element bound). */
  readonly #decode: DecodeOptions;

  constructor(slot: WorkerRank, ctx: IngestContext, log: ThrottledLog, maxBatchElements?: number) {
    this.#slot = slot;
    this.#decode = { eagle: ctx.applier.eagle, maxElements: maxBatchElements };
    this.#applier = ctx.applier;
    this.#hooks = ctx.hooks;
    this.#liveness = ctx.liveness;
    this.#log = log;
    this.#source = new RunSource(ctx.applier.kvCacheGroup, ctx.applier.blockSize);
    const onApplied = this.#hooks.onApplied?.bind(this.#hooks);
    this.#onStatus = onApplied === undefined ? undefined : (type, status) => onApplied(slot, type, status);
  }

  /** A batch is accepted and not yet fully applied. */
  get busy(): boolean {
    return this.#current !== undefined;
  }

  /**
   * The slot was just filled from a replica's snapshot. Until the next batch is accepted, a
   * reset for batches the engine can no longer give (no replay endpoint, its buffer no longer
   * reaching back, a failed replay), or for a throw on the apply path (`KEEPS_SEED`), keeps those
   * blocks: they are what is known, and clearing them would start the slot cold. Logged and counted.
   */
  seeded(): void {
    this.#seeded = true;
  }

  /**
   * Decodes an accepted batch (unless the stream already did: `decoded`); its events are applied by
   * `applySlice`. A batch that cannot be used is reported and skipped.
   *
   * A batch holding an event that did not decode is refused (`#refuse`): none of its stores touches the index,
   * its decoded removals do. The engine applied the batch as one step; its stores without the bad event could
   * index a state the engine never had (a store whose removal was the bad event, blocks chained under one that
   * was dropped), while its removals can only leave the index holding less than the engine does. It is judged
   * here, at no cost per event: the decoder (or the ingestion thread) has already collected every event's error
   * before a batch reaches the writer. The refusals the applier answers per event (another block size, another
   * group, an unnamed LoRA, an unknown parent) are not malformed events but ones kvgate does not index, which an
   * engine mixes with good ones by design (a hybrid model's groups), so they stay per event, as in Dynamo.
   *
   * An event of a kind kvgate does not know (a tag beside BlockStored, BlockRemoved and AllBlocksCleared) is no
   * malformed event: it is skipped, counted and logged once (`#skipUnknown`), and the rest of the batch applied in
   * order. Upstream does not skip it: vLLM's own decoder (msgspec, `KVEventBatch.events` a tagged union of the
   * three) and Dynamo's (`RawKvEvent`, serde's `unknown_variant`) fail the whole batch. kvgate does, because the
   * refusal's reason does not hold for it. A bad field of a known kind hides a store or removal kvgate should have
   * applied; a new kind is one kvgate could not apply however it decoded, and every other event of the batch is
   * one the engine did report. And it is not one rare batch: an engine newer than kvgate sends the kind for as
   * long as it runs, so refusing would drop its stores from every such batch (that worker's index empties and
   * routing misses it) for a version skew, not corruption. What skipping risks is bounded as the index always
   * is: should the new kind evict blocks, they stay predicted (a miss costs a prefill) until the engine removes
   * them again or restarts. vLLM evolves its events by added fields and `event_version`, which kvgate already
   * reads tolerantly (wire.ts); a new kind is the same skew one level up.
   */
  accept(seq: bigint, payload: Uint8Array, origin: BatchOrigin, decoded?: KvEventBatch): void {
    this.#seeded = false;
    const batch = decoded ?? this.read(seq, payload);
    if (batch === undefined) return;
    let bad = 0;
    for (const e of batch.errors)
      if (!isUnknownKind(e)) {
        bad++;
        this.decodeError(e, seq);
      }
    if (!this.ownRank(batch, seq)) return;
    if (bad < batch.errors.length) this.#skipUnknown(seq, batch.errors);
    if (bad > 0) {
      this.#refuse(seq, batch, bad, origin);
      return;
    }
    const packed = batch instanceof PackedBatch;
    const count = packed ? batch.count : batch.events.length;
    const word = packed ? batch.firstWord : 0;
    this.#current = { batch, origin, count, next: 0, word, applied: 0, salvage: false };
  }

  /**
   * A batch holding an event that did not decode (each already reported): counted as refused and logged; its
   * stores are dropped and its decoded removals (`BlockRemoved`, `AllBlocksCleared`) applied, in their order,
   * sliced as any batch (counted by `onSalvaged`). Dropping them too would leave blocks the engine evicted in
   * the index, predicted as hits until the engine stored or removed them again; applied without the batch's
   * stores they can only make the index hold less than the engine does (a store the engine made after a removal
   * of the same block stays out). A bad event that was itself a removal is lost: nothing says which blocks it
   * named. Not replayed instead: the engine's buffer holds the same bytes, refused again.
   */
  #refuse(seq: bigint, batch: KvEventBatch, bad: number, origin: BatchOrigin): void {
    // A handed-over batch builds its events as objects here (views of its buffer): refusals are rare.
    const events = batch.events;
    const removals = events.filter((ev) => ev.type !== 'stored');
    this.#hooks.onDropped?.(this.#slot, 'refused', seq);
    this.#log.warn(
      'refused',
      { seq: String(seq), badEvents: bad, goodEvents: events.length, removalsApplied: removals.length },
      'KV event batch refused: an event in it did not decode, so none of its stores were applied' +
        (removals.length > 0 ? ' (its removals were)' : ''),
    );
    if (removals.length === 0) return;
    const salvaged: KvEventBatch = { ts: batch.ts, dpRank: batch.dpRank, events: removals, errors: [] };
    this.#current = { batch: salvaged, origin, count: removals.length, next: 0, word: 0, applied: 0, salvage: true };
  }

  /**
   * The batch's events of a kind kvgate does not know (`isUnknownKind`): left out of its events by the decoder, so
   * the rest is applied in order, and counted (`onUnknownSkipped`). One warn line per episode: from the first such
   * event until the engine restarts (a restarted engine may be another version), not one per event or batch.
   */
  #skipUnknown(seq: bigint, errors: readonly KvEventDecodeError[]): void {
    const unknown = errors.filter(isUnknownKind);
    this.#hooks.onUnknownSkipped?.(this.#slot, unknown.length);
    if (this.#unknownEpisode) return;
    this.#unknownEpisode = true;
    this.#log.warn(
      'unknown_event',
      { seq: String(seq), skippedEvents: unknown.length, first: unknown[0]!.message },
      'KV events of a kind kvgate does not know were skipped and the rest of their batch applied (is the engine ' +
        'newer than kvgate?); logged once until the engine restarts, each such event counted',
    );
  }

  /** Whether a batch is for this slot's dp rank (or names none); one for another rank is reported (a decode error of `seq`). */
  ownRank(batch: KvEventBatch, seq: bigint): boolean {
    if (batch.dpRank === null || batch.dpRank === this.#slot.dpRank) return true;
    this.decodeError(
      {
        kind: 'dp_rank_mismatch',
        message: `batch is for dp rank ${batch.dpRank}, subscription is for rank ${this.#slot.dpRank}`,
      },
      seq,
    );
    return false;
  }

  /** A batch (`decoded`, or its payload read) if it can be read and is for this slot's dp rank; else reported, undefined. */
  readOwn(seq: bigint, payload: Uint8Array, decoded: KvEventBatch | undefined): KvEventBatch | undefined {
    const batch = decoded ?? this.read(seq, payload);
    return batch !== undefined && this.ownRank(batch, seq) ? batch : undefined;
  }

  /** Decodes a batch's payload; one that cannot be read is reported (a decode error of `seq`) and undefined. */
  read(seq: bigint, payload: Uint8Array): KvEventBatch | undefined {
    const r = decodeKvEventBatch(payload, this.#decode);
    if (r.ok) return r.batch;
    this.decodeError(r.error, seq);
    return undefined;
  }

  /** Applies the accepted batch's next events within `budget` (at least one). */
  applySlice(budget: TurnBudget): void {
    const cur = this.#current;
    if (cur === undefined) return;
    const n = Math.min(cur.count - cur.next, Math.max(1, budget.left), APPLY_SLICE);
    if (n > 0) {
      const to = cur.next + n;
      const batch = cur.batch;
      if (batch instanceof PackedBatch) cur.applied += this.#applyPacked(cur, batch, to);
      else {
        const slice =
          cur.next === 0 && n === cur.count ? batch : { ...batch, events: batch.events.slice(cur.next, to) };
        cur.applied += this.#applier.applyBatch(this.#slot, slice, this.#onStatus);
      }
      cur.next = to;
      budget.take(n);
      if (cur.salvage) this.#hooks.onSalvaged?.(this.#slot, n);
    }
    if (cur.next < cur.count) return;
    this.#current = undefined;
    // A refused batch's removals alone do not show the slot's events flowing, nor count as a replayed batch.
    if (cur.salvage) return;
    // An accepted batch's errors, if any, are events of an unknown kind, skipped: an empty one shows the flow too.
    if (cur.applied > 0 || cur.count === 0) this.#liveness?.noteEvent(this.#slot);
    if (cur.origin === 'replay') this.#hooks.onBatch?.(this.#slot, 'replay');
  }

  /**
   * Applies a handed-over batch's events up to `to` from its buffer; returns how many changed the index as
   * meant. Runs of the common events go to the module in one call each (the applier's `applyPackedRun`);
   * an event it leaves, or every event where no run can be made, is read and applied here one at a time.
   */
  #applyPacked(cur: Current, batch: PackedBatch, to: number): number {
    const onStatus = this.#onStatus;
    const src = this.#source;
    const run = this.#run;
    let applied = 0;
    while (cur.next < to) {
      src.u32 = batch.u32;
      src.from = cur.word;
      src.end = batch.end();
      src.maxEvents = to - cur.next;
      if (this.#applier.applyPackedRun(this.#slot, src, run, batch)) {
        const codes = run.outcomes;
        for (let i = 0; i < run.events; i++) {
          const status = packedStatus(codes[i]!);
          onStatus?.(packedType(codes[i]!), status);
          if (isAppliedStatus(status)) applied++;
        }
        cur.next += run.events;
        cur.word = run.next;
        // Any stop but `host` goes on with another run, unless it made no progress (a malformed range: the
        // event is read here, where its own checks apply).
        if (run.stop !== PackedStop.host && run.events > 0) continue;
      }
      const ev = this.#read;
      cur.word = batch.read(cur.word, ev);
      const status = this.#applier.applyPacked(this.#slot, ev);
      onStatus?.(ev.type, status);
      if (isAppliedStatus(status)) applied++;
      cur.next++;
    }
    return applied;
  }

  /** Forgets the batch being applied (the slot is about to be cleared, or the stream closed). */
  abandon(): void {
    this.#current = undefined;
  }

  /** Drops what the slot holds without a reset to report (the index was discarded whole: counted once, as its rebuild). */
  clear(): void {
    this.#seeded = false;
    this.#applier.clearSlot(this.#slot);
  }

  /** Drops every block of the slot, and says why (a freshly seeded slot keeps them for a lost catch-up; see `seeded`). */
  reset(reason: ResetReason): void {
    if (reason === 'restart') this.#unknownEpisode = false;
    const seeded = this.#seeded;
    this.#seeded = false;
    if (seeded && KEEPS_SEED.has(reason)) {
      this.#hooks.onSeedKept?.(this.#slot, reason);
      this.#log.warn(
        'seed_kept',
        { reason },
        'KV events since the replica snapshot cannot be replayed from the engine: ' +
          "keeping the snapshot's blocks and continuing from live events",
      );
      return;
    }
    const blocks = this.#applier.clearSlot(this.#slot);
    this.#hooks.onReset?.(this.#slot, reason, blocks);
  }

  decodeError(error: KvEventDecodeError, seq: bigint | undefined): void {
    this.#hooks.onDecodeError?.({ ...error, workerId: this.#slot.workerId, dpRank: this.#slot.dpRank, seq });
    const fields = { kind: error.kind, seq: seq === undefined ? undefined : String(seq), eventIndex: error.eventIndex };
    this.#log.warn(`decode:${error.kind}`, fields, `KV event dropped: ${error.message}`);
  }
}
