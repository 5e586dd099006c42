/**
 * The cache salt of a slot's salted blocks, by engine block hash, for the events that do not say it.
 *
 * A salted request's blocks hash with the salt in every block's seed (src/wasm's `requestSeed`). SGLang reports
 * the salt on every event (`cacheSalt`); vLLM reports it only in block 0's `extra_keys` entry (`extraKeyStrings`),
 * so only on an event that starts at the root: a later event of the same chain (a follow-up turn extending or
 * forking from any block of the earlier prompt) has a parent and no salt, and inherits its parent block's.
 *
 * Only salted blocks are remembered (unsalted traffic costs one size check), every block of a salted chain (a
 * later event may fork from any of them). An entry goes with its block's removal from the last index of the slot
 * holding it (the applier's storage tiers and KV-cache groups: removed-salts.ts), the slot's clear or removal,
 * or, past `cap` entries in all, the oldest entry of the slot that stored last (else of the first slot holding
 * any): counted, and the first eviction of an episode (the memory had been under three quarters of the cap)
 * reported as its start, as the index's memory budget does.
 *
 * The entries (salt-entries.ts) are kept in typed arrays keyed by the hash's 32-bit halves, salts interned: the
 * applier asks for every salted event, so no call makes an object or a `bigint` (a hash is split by writing it
 * to a one-element `BigUint64Array` and reading its `Uint32Array` view, which V8 compiles without a `bigint`).
 *
 * A replica's snapshot of the slot carries its entries (`exportSlot`, oldest first) and a replica seeded from it
 * takes them (`importSlot`, under its own cap): the root events of the snapshot's chains lie at or before its
 * cursor, so the seeded replica never sees them, only the later events that inherit their salt.
 */
import type { SaltRun, WorkerRank } from '../common/index.js';
import { SaltEntries } from './salt-entries.js';
import type { StoredBlocksEvent } from './types.js';

/** Entries remembered in all by default: about 36 MiB at most (salt-entries.ts: 36 bytes an entry, salts shared). */
const kDefaultSaltMemoryCap = 1 << 20;

/** One eviction under the cap; `episodeStart`: the first since the memory was under three quarters of it. */
export interface SaltEvictionReport {
  readonly evicted: number;
  readonly episodeStart: boolean;
}

/**
 * The salt a root event (no parent) of vLLM reports in `extraKeyStrings`: its strings other than the LoRA name.
 * `undefined` when there is none; `ambiguous` when more than one remains (the event is then hashed unsalted).
 */
function rootSaltOf(ev: StoredBlocksEvent): string | undefined | 'ambiguous' {
  const strings = ev.extraKeyStrings;
  if (strings === undefined || ev.parentHash !== null) return undefined;
  let salt: string | undefined;
  let dropLora = ev.loraName !== undefined;
  for (const s of strings) {
    if (dropLora && s === ev.loraName) {
      dropLora = false; // the LoRA name once; a salt equal to it is still a salt
      continue;
    }
    if (salt !== undefined) return 'ambiguous';
    salt = s;
  }
  return salt;
}

/** A slot's id in the entries and its place in the order slots are evicted from. */
interface SlotRecord {
  readonly id: number;
}

export class SaltMemory {
  readonly cap: number;
  readonly #entries = new SaltEntries();
  /** By worker id and dp rank; `#order` holds them in the order they first remembered (since a clear). */
  readonly #slots = new Map<number, Map<number, SlotRecord>>();
  readonly #order = new Set<SlotRecord>();
  readonly #freeIds: number[] = [];
  #nextId = 0;
  #inEpisode = false;
  /** Entries evicted under the cap since the start. */
  evictions = 0;
  /** A hash's halves: the hash is written to `#h64` and read back as two numbers (no `bigint` is made). */
  readonly #h64 = new BigUint64Array(1);
  readonly #h32 = new Uint32Array(this.#h64.buffer);

  constructor(
    cap = kDefaultSaltMemoryCap,
    private readonly onEvicted?: (report: SaltEvictionReport) => void,
  ) {
    this.cap = Math.max(1, Math.floor(cap));
  }

  /** Entries held in all. */
  get size(): number {
    return this.#entries.size;
  }

  /** The salt of a block the slot stored salted; `undefined` for an unsalted or unknown one. */
  saltOf(slot: WorkerRank, engineHash: bigint): string | undefined {
    const entries = this.#entries;
    if (entries.size === 0) return undefined;
    const r = this.#slots.get(slot.workerId)?.get(slot.dpRank);
    if (r === undefined || entries.count(r.id) === 0) return undefined;
    this.#h64[0] = engineHash;
    const e = entries.find(r.id, this.#h32[0]!, this.#h32[1]!);
    return e < 0 ? undefined : entries.saltOf(entries.saltId(e));
  }

  /**
   * The salt a stored event of the slot is hashed with when it does not carry `cacheSalt` (vLLM's): a root event's
   * from its `extraKeyStrings` (`rootSaltOf`; an ambiguous one is hashed unsalted, `onAmbiguous` hears of it), a
   * later event's from its parent block. `undefined` for an event with `cacheSalt` (SGLang's, hashed with it as
   * ever) and for unsalted traffic. The applier's rule, and an ingestion thread's guess of it (batch-hasher.ts).
   */
  inferredSalt(slot: WorkerRank, ev: StoredBlocksEvent, onAmbiguous?: () => void): string | undefined {
    if (ev.cacheSalt !== undefined) return undefined;
    if (ev.parentHash !== null) return this.saltOf(slot, ev.parentHash);
    if (ev.extraKeyStrings === undefined) return undefined;
    const salt = rootSaltOf(ev);
    if (salt !== 'ambiguous') return salt;
    onAmbiguous?.();
    return undefined;
  }

  /** Whether the slot holds any salted block (a packed run then checks its events' salts: see the applier). */
  holds(slot: WorkerRank): boolean {
    if (this.#entries.size === 0) return false;
    const r = this.#slots.get(slot.workerId)?.get(slot.dpRank);
    return r !== undefined && this.#entries.count(r.id) > 0;
  }

  /** Remembers the salt of every block of a stored salted chain. */
  remember(slot: WorkerRank, engineHashes: BigUint64Array, salt: string): void {
    const r = this.#record(slot);
    const entries = this.#entries;
    const h64 = this.#h64;
    const h32 = this.#h32;
    const id = entries.hold(salt);
    for (let i = 0; i < engineHashes.length; i++) {
      h64[0] = engineHashes[i]!;
      const e = entries.find(r.id, h32[0]!, h32[1]!);
      if (e >= 0) {
        entries.renew(e, id); // re-stored: the newest again
        continue;
      }
      // Room is made before the add (the arrays never hold more than `cap`): the same entry goes as after it.
      if (entries.size >= this.cap) this.#evictOne(r);
      entries.add(r.id, h32[0]!, h32[1]!, id);
    }
    entries.release(id);
    if (entries.size <= (this.cap * 3) / 4) this.#inEpisode = false;
  }

  /** The slot's entries, oldest first, as runs of consecutive entries sharing a salt (a replica snapshot's). */
  exportSlot(slot: WorkerRank): SaltRun[] {
    const entries = this.#entries;
    const r = entries.size === 0 ? undefined : this.#slots.get(slot.workerId)?.get(slot.dpRank);
    if (r === undefined) return [];
    const out: SaltRun[] = [];
    for (let e = entries.oldest(r.id); e >= 0;) {
      const salt = entries.saltId(e);
      let n = 0;
      for (let f = e; f >= 0 && entries.saltId(f) === salt; f = entries.newer(f)) n++;
      const hashes = new BigUint64Array(n);
      const halves = new Uint32Array(hashes.buffer);
      for (let i = 0; i < n; i++, e = entries.newer(e)) {
        halves[2 * i] = entries.lo(e);
        halves[2 * i + 1] = entries.hi(e);
      }
      out.push({ salt: entries.saltOf(salt), hashes });
    }
    return out;
  }

  /** Remembers a replica snapshot's entries of the slot (`exportSlot`'s), in order, under this memory's cap. */
  importSlot(slot: WorkerRank, runs: readonly SaltRun[]): number {
    let n = 0;
    for (const r of runs) {
      this.remember(slot, r.hashes, r.salt);
      n += r.hashes.length;
    }
    return n;
  }

  /**
   * Copies to `out` (room for `engineHashes.length`), in order, the hashes among `engineHashes` whose salt the slot
   * holds; returns how many. 0 at once while the slot holds no salted block.
   */
  saltedAmong(slot: WorkerRank, engineHashes: BigUint64Array, out: BigUint64Array): number {
    const entries = this.#entries;
    if (entries.size === 0) return 0;
    const r = this.#slots.get(slot.workerId)?.get(slot.dpRank);
    if (r === undefined || entries.count(r.id) === 0) return 0;
    const h64 = this.#h64;
    const h32 = this.#h32;
    let n = 0;
    for (let i = 0; i < engineHashes.length; i++) {
      h64[0] = engineHashes[i]!;
      if (entries.find(r.id, h32[0]!, h32[1]!) >= 0) out[n++] = h64[0];
    }
    return n;
  }

  /**
   * Forgets removed blocks (no work while nothing salted is held); `keep`, when given, keeps `engineHashes[i]`'s
   * where `keep[i]` is not 0 (a block another index of the slot still holds: removed-salts.ts).
   */
  forget(slot: WorkerRank, engineHashes: BigUint64Array, keep?: Uint8Array): void {
    const entries = this.#entries;
    if (entries.size === 0) return;
    const r = this.#slots.get(slot.workerId)?.get(slot.dpRank);
    if (r === undefined) return;
    const h64 = this.#h64;
    const h32 = this.#h32;
    for (let i = 0; i < engineHashes.length && entries.count(r.id) > 0; i++) {
      if (keep !== undefined && keep[i] !== 0) continue;
      h64[0] = engineHashes[i]!;
      const e = entries.find(r.id, h32[0]!, h32[1]!);
      if (e >= 0) entries.remove(e);
    }
    this.#noteShrunk();
  }

  /** Forgets every block of the slot (cleared or removed). */
  clearSlot(slot: WorkerRank): void {
    const entries = this.#entries;
    if (entries.size === 0) return;
    const ranks = this.#slots.get(slot.workerId);
    const r = ranks?.get(slot.dpRank);
    if (r === undefined) return;
    for (let e = entries.oldest(r.id); e >= 0; e = entries.oldest(r.id)) entries.remove(e);
    ranks!.delete(slot.dpRank);
    if (ranks!.size === 0) this.#slots.delete(slot.workerId);
    this.#order.delete(r);
    this.#freeIds.push(r.id);
    this.#noteShrunk();
  }

  /** The slot's record, made when it remembers first (since its last clear). */
  #record(slot: WorkerRank): SlotRecord {
    let ranks = this.#slots.get(slot.workerId);
    if (ranks === undefined) this.#slots.set(slot.workerId, (ranks = new Map()));
    let r = ranks.get(slot.dpRank);
    if (r === undefined) {
      r = { id: this.#freeIds.pop() ?? this.#nextId++ };
      ranks.set(slot.dpRank, r);
      this.#order.add(r);
    }
    return r;
  }

  #noteShrunk(): void {
    if (this.#entries.size <= (this.cap * 3) / 4) this.#inEpisode = false;
  }

  /**
   * Makes room for an entry `r` (the slot storing) is about to add: evicts its oldest, or, when it holds none
   * yet (the new one would be its only), the oldest of the first slot holding any.
   */
  #evictOne(r: SlotRecord): void {
    const entries = this.#entries;
    let from = r;
    if (entries.count(r.id) === 0) {
      for (const other of this.#order) {
        if (other !== r && entries.count(other.id) > 0) {
          from = other;
          break;
        }
      }
    }
    const oldest = entries.oldest(from.id);
    if (oldest < 0) return;
    entries.remove(oldest);
    this.evictions++;
    const episodeStart = !this.#inEpisode;
    this.#inEpisode = true;
    this.onEvicted?.({ evicted: 1, episodeStart });
  }
}
