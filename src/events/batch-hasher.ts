/**
 * An ingestion thread's hashing of its batches' stored blocks (the `local` hashes packed with them,
 * batch-codec.ts), with the cache salt it infers for vLLM's events that do not carry one, as the applier does
 * (salt-memory.ts): a root event's from its `extraKeyStrings`, a later event's from its parent block's, kept in
 * a `SaltMemory` of the thread's own.
 *
 * A block's salt is kept, as on the main thread, while any storage tier or KV-cache group of the stream still
 * holds the block (removed-salts.ts asks the main thread's indexes). The thread has no index, so it remembers the
 * salted blocks of each (tier, group) of a stream apart, one slot of its memory each (a `Place`): a removal forgets
 * the block in its own place only, and a later event's parent is looked up in every place of the stream. An engine
 * that offloads (the same hashes in several tiers) or serves a hybrid model (in several groups) then gets its
 * follow-ups hashed here with their salt, not guessed unsalted after another place's removal.
 *
 * The inference is still a guess: the thread sees only the live batches it decodes, not the replays, resets,
 * replica seeds and evictions of the main thread. So each event's hashes go with the salt they were computed with
 * (`salts`), and the main thread uses them only where its own memory infers the same salt (applier.ts), hashing the
 * event itself otherwise. A wrong or forgotten guess costs main-thread time, never a wrong index.
 */
import type { WorkerRank } from '../common/index.js';
import { storedLocalHashes } from './applier.js';
import { SaltMemory } from './salt-memory.js';
import { STORAGE_TIERS, type KvEventBatch, type StorageTier, type StoredBlocksEvent } from './types.js';

/**
 * Salted blocks a thread remembers over all its streams (a few dozen bytes each): about a quarter of the main
 * thread's default cap, whose blocks the threads share out. Past it the oldest are forgotten (uncounted: only
 * speed depends on them).
 */
const kThreadSaltCap = 1 << 18;

/** Per event of a batch: the stored blocks' own hashes (or none), and the inferred salt they were hashed with. */
export interface BatchHashes {
  readonly locals: readonly (BigUint64Array | undefined)[];
  /** Empty when no event was hashed with an inferred salt. */
  readonly salts: readonly (string | undefined)[];
}

export class BatchHasher {
  readonly #salts: SaltMemory;
  /** Each stream's places by `placeKey`. */
  readonly #places = new Map<number, Map<number, Place>>();
  #nextPlace = 0;

  constructor(cap = kThreadSaltCap) {
    this.#salts = new SaltMemory(cap);
  }

  /** Salted blocks remembered over all streams. */
  get remembered(): number {
    return this.#salts.size;
  }

  /**
   * Hashes the stored events of one batch of stream `stream`, in order (an event's salt may come from a block an
   * earlier event of the batch stored), and follows its removals and clears. None where the applier refuses.
   */
  hash(stream: number, batch: KvEventBatch): BatchHashes {
    const events = batch.events;
    const locals = new Array<BigUint64Array | undefined>(events.length);
    let salts: (string | undefined)[] | undefined;
    for (let i = 0; i < events.length; i++) {
      const ev = events[i]!;
      if (ev.type === 'cleared') this.forget(stream);
      else if (ev.type === 'removed') {
        if (this.#salts.size === 0) continue; // nothing salted held: nothing to forget
        const place = this.#places.get(stream)?.get(placeKey(ev.tier, ev.groupIdx));
        if (place !== undefined) this.#salts.forget(place, ev.blockHashes);
      } else if (ev.blockHashes.length > 0) {
        const salt = this.#inferred(stream, ev);
        try {
          locals[i] = storedLocalHashes(ev, ev.blockSize, salt);
        } catch {
          // The applier meets the same refusal on the main thread and reports it as it always does.
          continue;
        }
        if (salt === undefined) continue;
        this.#salts.remember(this.#place(stream, ev.tier, ev.groupIdx), ev.blockHashes, salt);
        (salts ??= new Array<string | undefined>(events.length))[i] = salt;
      }
    }
    return { locals, salts: salts ?? [] };
  }

  /** Forgets a stream's blocks in every place (removed from the thread, or cleared). */
  forget(stream: number): void {
    const places = this.#places.get(stream);
    if (places === undefined) return;
    for (const place of places.values()) this.#salts.clearSlot(place);
    this.#places.delete(stream);
  }

  /**
   * The applier's inference (`SaltMemory.inferredSalt`) over what this thread saw: a root event's salt from its own
   * `extraKeyStrings`, a later event's from its parent block in any place of its stream (a block's salt is the same
   * wherever it is held). Unsalted traffic costs a size check.
   */
  #inferred(stream: number, ev: StoredBlocksEvent): string | undefined {
    if (ev.parentHash === null) return this.#salts.inferredSalt(ROOT, ev);
    if (ev.cacheSalt !== undefined || this.#salts.size === 0) return undefined;
    const places = this.#places.get(stream);
    if (places !== undefined)
      for (const place of places.values()) {
        const salt = this.#salts.saltOf(place, ev.parentHash);
        if (salt !== undefined) return salt;
      }
    return undefined;
  }

  /** The stream's place for a tier and group, made when first stored in. */
  #place(stream: number, tier: StorageTier, groupIdx: number): Place {
    let places = this.#places.get(stream);
    if (places === undefined) this.#places.set(stream, (places = new Map()));
    const key = placeKey(tier, groupIdx);
    let place = places.get(key);
    if (place === undefined) {
      place = { workerId: this.#nextPlace++, dpRank: 0 };
      places.set(key, place);
    }
    return place;
  }
}

/**
 * One (tier, KV-cache group) of a stream as a slot of the thread's memory: its id unique within the thread, never
 * reused (a number runs out after 2^53 places).
 */
type Place = WorkerRank;

/** What a root event's inference is given for a slot: it reads the event's own `extraKeyStrings`, never a slot. */
const ROOT: Place = { workerId: -1, dpRank: 0 };

/** A (tier, group) pair as one number, the key of a stream's places. */
function placeKey(tier: StorageTier, groupIdx: number): number {
  return groupIdx * STORAGE_TIERS.length + STORAGE_TIERS.indexOf(tier);
}
