/**
 * The cache salt of a slot's salted blocks, by engine block hash, for the events that do not say it.
 *
 * A salted request's blocks hash with the salt in every block's seed (src/wasm's `requestSeed`). SGLang reports
 * the salt on every event (`cacheSalt`); vLLM reports it only in block 0's `extra_keys` entry (`extraKeyStrings`),
 * so only on an event that starts at the root: a later event of the same chain (a follow-up turn extending or
 * forking from any block of the earlier prompt) has a parent and no salt, and inherits its parent block's.
 *
 * Only salted blocks are remembered (unsalted traffic costs one size check), every block of a salted chain (a
 * later event may fork from any of them). An entry goes with its block's `removed`, the slot's clear or removal,
 * or, past `cap` entries in all, the oldest entry of the slot that stored last (else of the first slot holding
 * any): counted, and the first eviction of an episode (the memory had been under three quarters of the cap)
 * reported as its start, as the index's memory budget does.
 *
 * A replica's snapshot of the slot carries its entries (`exportSlot`, oldest first) and a replica seeded from it
 * takes them (`importSlot`, under its own cap): the root events of the snapshot's chains lie at or before its
 * cursor, so the seeded replica never sees them, only the later events that inherit their salt.
 */
import type { SaltRun, WorkerRank } from '../common/index.js';
import type { StoredBlocksEvent } from './types.js';

/** Entries remembered in all by default: about 100 MiB at worst (a few dozen bytes an entry, salts shared). */
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
export function rootSaltOf(ev: StoredBlocksEvent): string | undefined | 'ambiguous' {
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

export class SaltMemory {
  readonly cap: number;
  readonly #slots = new Map<string, Map<bigint, string>>();
  #size = 0;
  #inEpisode = false;
  /** Entries evicted under the cap since the start. */
  evictions = 0;

  constructor(
    cap = kDefaultSaltMemoryCap,
    private readonly onEvicted?: (report: SaltEvictionReport) => void,
  ) {
    this.cap = Math.max(1, Math.floor(cap));
  }

  /** Entries held in all. */
  get size(): number {
    return this.#size;
  }

  /** The salt of a block the slot stored salted; `undefined` for an unsalted or unknown one. */
  saltOf(slot: WorkerRank, engineHash: bigint): string | undefined {
    if (this.#size === 0) return undefined;
    return this.#slots.get(key(slot))?.get(engineHash);
  }

  /** Whether the slot holds any salted block (a packed run then checks its events' salts: see the applier). */
  holds(slot: WorkerRank): boolean {
    return this.#size > 0 && (this.#slots.get(key(slot))?.size ?? 0) > 0;
  }

  /** Remembers the salt of every block of a stored salted chain. */
  remember(slot: WorkerRank, engineHashes: BigUint64Array, salt: string): void {
    const k = key(slot);
    let m = this.#slots.get(k);
    if (m === undefined) this.#slots.set(k, (m = new Map()));
    for (const h of engineHashes) {
      const had = m.has(h);
      m.delete(h); // re-stored: the newest again
      m.set(h, salt);
      if (!had) this.#size++;
      if (this.#size > this.cap) this.#evictOne(m);
    }
    if (this.#size <= (this.cap * 3) / 4) this.#inEpisode = false;
  }

  /** The slot's entries, oldest first, as runs of consecutive entries sharing a salt (a replica snapshot's). */
  exportSlot(slot: WorkerRank): SaltRun[] {
    const m = this.#size === 0 ? undefined : this.#slots.get(key(slot));
    if (m === undefined) return [];
    const out: SaltRun[] = [];
    let run: bigint[] = [];
    let salt: string | undefined;
    for (const [h, s] of m) {
      if (s !== salt && salt !== undefined) {
        out.push({ salt, hashes: BigUint64Array.from(run) });
        run = [];
      }
      salt = s;
      run.push(h);
    }
    if (salt !== undefined) out.push({ salt, hashes: BigUint64Array.from(run) });
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

  /** Forgets removed blocks (no work while nothing salted is held). */
  forget(slot: WorkerRank, engineHashes: BigUint64Array): void {
    if (this.#size === 0) return;
    const m = this.#slots.get(key(slot));
    if (m === undefined) return;
    for (const h of engineHashes) if (m.delete(h)) this.#size--;
    this.#noteShrunk();
  }

  /** Forgets every block of the slot (cleared or removed). */
  clearSlot(slot: WorkerRank): void {
    if (this.#size === 0) return;
    const k = key(slot);
    const m = this.#slots.get(k);
    if (m === undefined) return;
    this.#size -= m.size;
    this.#slots.delete(k);
    this.#noteShrunk();
  }

  #noteShrunk(): void {
    if (this.#size <= (this.cap * 3) / 4) this.#inEpisode = false;
  }

  /** Evicts the oldest entry of `m` (the slot storing), or of the first slot holding any when `m` has only one. */
  #evictOne(m: Map<bigint, string>): void {
    let from = m;
    if (m.size <= 1) {
      for (const other of this.#slots.values()) {
        if (other !== m && other.size > 0) {
          from = other;
          break;
        }
      }
    }
    const oldest = from.keys().next();
    if (oldest.done === true) return;
    from.delete(oldest.value);
    this.#size--;
    this.evictions++;
    const episodeStart = !this.#inEpisode;
    this.#inEpisode = true;
    this.onEvicted?.({ evicted: 1, episodeStart });
  }
}

function key(slot: WorkerRank): string {
  return `${slot.workerId}:${slot.dpRank}`;
}
