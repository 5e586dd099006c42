/**
 * An ingestion thread's hashing of its batches' stored blocks (the `local` hashes packed with them,
 * batch-codec.ts), with the cache salt it infers for vLLM's events that do not carry one, as the applier does
 * (salt-memory.ts): a root event's from its `extraKeyStrings`, a later event's from its parent block's, kept in
 * a `SaltMemory` of the thread's own, one slot per stream.
 *
 * The inference is a guess: the thread sees only the live batches it decodes, not the replays, resets, replica
 * seeds and evictions of the main thread, nor its indexes. It forgets a block's salt at the block's removal from any
 * storage tier or KV-cache group, where the main thread keeps it while another index of the slot holds the block
 * (removed-salts.ts): a later event under the block in another tier or group is hashed here unsalted. So each
 * event's hashes go with the salt they were computed with (`salts`), and the main thread uses them only where its
 * own memory infers the same salt (applier.ts), hashing the event itself otherwise. A wrong or forgotten guess
 * costs main-thread time, never a wrong index.
 */
import type { WorkerRank } from '../common/index.js';
import { storedLocalHashes } from './applier.js';
import { SaltMemory } from './salt-memory.js';
import type { KvEventBatch } from './types.js';

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
    const slot = slotOf(stream);
    const events = batch.events;
    const locals = new Array<BigUint64Array | undefined>(events.length);
    let salts: (string | undefined)[] | undefined;
    for (let i = 0; i < events.length; i++) {
      const ev = events[i]!;
      if (ev.type === 'cleared') this.#salts.clearSlot(slot);
      else if (ev.type === 'removed') this.#salts.forget(slot, ev.blockHashes);
      else if (ev.blockHashes.length > 0) {
        // The applier's inference, over what this thread saw.
        const salt = this.#salts.inferredSalt(slot, ev);
        try {
          locals[i] = storedLocalHashes(ev, ev.blockSize, salt);
        } catch {
          // The applier meets the same refusal on the main thread and reports it as it always does.
          continue;
        }
        if (salt === undefined) continue;
        this.#salts.remember(slot, ev.blockHashes, salt);
        (salts ??= new Array<string | undefined>(events.length))[i] = salt;
      }
    }
    return { locals, salts: salts ?? [] };
  }

  /** Forgets a stream's blocks (removed from the thread). */
  forget(stream: number): void {
    this.#salts.clearSlot(slotOf(stream));
  }
}

/** A stream as a slot of the thread's memory (its id is unique within the thread). */
function slotOf(stream: number): WorkerRank {
  return { workerId: stream, dpRank: 0 };
}
