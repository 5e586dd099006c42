/**
 * Decoded KV-event batches as one compact binary buffer, the form in which an
 * ingestion thread hands its batches to the main thread (ingest-pool.ts): the
 * thread decodes the msgpack and hashes the stored blocks' tokens, then packs
 * many batches, of any of its streams, into one `ArrayBuffer` that is
 * transferred, not copied. The main thread reads it in place (packed-batch.ts:
 * each batch a `PackedBatch`, its events applied straight from the buffer),
 * with the stored events' `localHashes` already computed.
 *
 * Layout, in 8-byte little-endian words (typed-array views need the alignment):
 *   batch:   [stream id u32 | events u32] [seq u64] [ts f64] [dp rank + 1 u32 | errors index + 1 u32]
 *            [words u32 | salted u32] events...   (words: the batch's, header included, so a reader steps over it
 *            at once; salted: 1 when a stored event's local hashes were computed with an inferred salt)
 *   removed: [kind u8, tier u8 | -] [group f64] [hashes u32 | -] hashes...
 *   stored:  [kind, tier, has parent u8 | salt index + 1 u32] [group f64] [hashes u32 | local u32]
 *            [tokens u32 | block size u32] [dropped u32 | extras index + 1 u32] [parent u64] hashes... local...
 *            tokens (2 a word)...
 *   cleared: [kind u8 | -]
 * Rare fields (a LoRA, a cache salt, multimodal hashes, vLLM's extra key strings, a hybrid group's spec, Eagle's
 * next token) and a batch's per-event decode errors travel beside the buffer as structured-clone values, indexed
 * from it; so do the salts the thread inferred for vLLM's events (batch-hasher.ts), the one its local hashes were
 * computed with indexed from the stored event's first word (0: none). The module reads neither salt word.
 */
import {
  eachPackedBatch,
  KIND_CLEARED,
  KIND_REMOVED,
  KIND_STORED,
  NO_LOCALS,
  type PackedBatches,
  type StoredExtras,
} from './packed-batch.js';
import { STORAGE_TIERS, type KvCacheEvent, type KvEventBatch, type KvEventDecodeError } from './types.js';
import type { StoredBlocksEvent } from './types.js';

export type { PackedBatches } from './packed-batch.js';

const TIER_INDEX = new Map(STORAGE_TIERS.map((t, i) => [t, i]));

const EXTRA_FIELDS = [
  'loraName',
  'loraId',
  'cacheSalt',
  'mmHashes',
  'extraKeyStrings',
  'specKind',
  'slidingWindow',
  'leadingNullBlocks',
  'eagleNextToken',
] as const satisfies readonly (keyof StoredExtras)[];

/** Per event of a batch, the stored blocks' own hashes computed by the packing thread (or none). */
export type LocalHashes = readonly (BigUint64Array | undefined)[];

/** Words a batch takes packed: the bound a buffer must have room for. */
function packedWords(batch: KvEventBatch, locals: LocalHashes): number {
  let n = 5;
  const events = batch.events;
  for (let i = 0; i < events.length; i++) {
    const ev = events[i]!;
    if (ev.type === 'cleared') n += 1;
    else if (ev.type === 'removed') n += 3 + ev.blockHashes.length;
    else n += 6 + ev.blockHashes.length + (locals[i]?.length ?? 0) + Math.ceil(ev.tokenIds.length / 2);
  }
  return n;
}

/** Whether any rare field is set (spelled out: a loop over the names is a slow keyed access per event). */
function hasExtras(ev: StoredBlocksEvent): boolean {
  return (
    ev.loraName !== undefined ||
    ev.loraId !== undefined ||
    ev.cacheSalt !== undefined ||
    ev.mmHashes !== undefined ||
    ev.extraKeyStrings !== undefined ||
    ev.specKind !== undefined ||
    ev.slidingWindow !== undefined ||
    ev.leadingNullBlocks !== undefined ||
    ev.eagleNextToken !== undefined
  );
}

/** Accumulates batches of an ingestion thread's streams until `take()` hands them over. */
export class BatchPacker {
  readonly #minBytes: number;
  #buf!: ArrayBuffer;
  #u32!: Uint32Array;
  #u64!: BigUint64Array;
  #f64!: Float64Array;
  #at = 0;
  #batches = 0;
  #extras: StoredExtras[] = [];
  #errors: KvEventDecodeError[][] = [];
  #salts: string[] = [];
  readonly #saltIds = new Map<string, number>();

  /** @param minBytes the size of each fresh buffer (a larger batch gets a buffer of its own size). */
  constructor(minBytes = 1 << 16) {
    this.#minBytes = minBytes;
    this.#fresh(0);
  }

  /** Batches packed since the last `take()`. */
  get batches(): number {
    return this.#batches;
  }

  /** Bytes packed since the last `take()`. */
  get bytes(): number {
    return this.#at * 8;
  }

  /**
   * Packs one batch of stream `id` (with `locals`, the stored events' own hashes, and `salts`, the salt each was
   * computed with beside the event's own fields, both parallel to its events), unless it does not fit in what
   * is left of the current buffer: false then, and the caller takes the buffer and adds it again. A batch
   * always fits an empty buffer.
   */
  add(
    id: number,
    seq: bigint,
    batch: KvEventBatch,
    locals: LocalHashes = [],
    salts: readonly (string | undefined)[] = [],
  ): boolean {
    const need = packedWords(batch, locals);
    if (this.#at + need > this.#u64.length) {
      if (this.#batches > 0) return false;
      this.#fresh(need);
    }
    const u32 = this.#u32;
    const start = this.#at;
    let w = start;
    u32[2 * w] = id;
    u32[2 * w + 1] = batch.events.length;
    this.#u64[w + 1] = seq;
    this.#f64[w + 2] = batch.ts;
    u32[2 * (w + 3)] = batch.dpRank === null ? 0 : batch.dpRank + 1;
    u32[2 * (w + 3) + 1] = batch.errors.length === 0 ? 0 : this.#errors.push([...batch.errors]);
    w += 5;
    const events = batch.events;
    let salted = 0;
    for (let i = 0; i < events.length; i++) {
      const local = locals[i];
      const salt = local === undefined ? 0 : this.#saltId(salts[i]);
      salted |= salt;
      w = this.#event(w, events[i]!, local, salt);
    }
    u32[2 * (start + 4)] = w - start;
    u32[2 * (start + 4) + 1] = salted === 0 ? 0 : 1;
    this.#at = w;
    this.#batches++;
    return true;
  }

  /** The salt's index + 1 in this buffer's table; 0 for none. */
  #saltId(salt: string | undefined): number {
    if (salt === undefined) return 0;
    let id = this.#saltIds.get(salt);
    if (id === undefined) this.#saltIds.set(salt, (id = this.#salts.push(salt)));
    return id;
  }

  #event(w: number, ev: KvCacheEvent, local: BigUint64Array | undefined, salt: number): number {
    const u32 = this.#u32;
    if (ev.type === 'cleared') {
      u32[2 * w] = KIND_CLEARED;
      return w + 1;
    }
    const tier = TIER_INDEX.get(ev.tier)! << 8;
    this.#f64[w + 1] = ev.groupIdx;
    if (ev.type === 'removed') {
      u32[2 * w] = KIND_REMOVED | tier;
      u32[2 * (w + 2)] = ev.blockHashes.length;
      this.#u64.set(ev.blockHashes, w + 3);
      return w + 3 + ev.blockHashes.length;
    }
    u32[2 * w] = KIND_STORED | tier | (ev.parentHash === null ? 0 : 1 << 16);
    u32[2 * w + 1] = salt;
    u32[2 * (w + 2)] = ev.blockHashes.length;
    u32[2 * (w + 2) + 1] = local === undefined ? NO_LOCALS : local.length;
    u32[2 * (w + 3)] = ev.tokenIds.length;
    u32[2 * (w + 3) + 1] = ev.blockSize;
    u32[2 * (w + 4)] = ev.droppedBlocks;
    // An offloading placeholder (block size 0) goes as a rare one: a plain store's block size is judged (applyPacked, the module).
    u32[2 * (w + 4) + 1] = hasExtras(ev) || ev.blockSize === 0 ? this.#extras.push(storedExtras(ev)) : 0;
    this.#u64[w + 5] = ev.parentHash ?? 0n;
    w += 6;
    this.#u64.set(ev.blockHashes, w);
    w += ev.blockHashes.length;
    if (local !== undefined) {
      this.#u64.set(local, w);
      w += local.length;
    }
    u32.set(ev.tokenIds, 2 * w);
    return w + Math.ceil(ev.tokenIds.length / 2);
  }

  /**
   * Hands over what was packed, in a buffer to be transferred. A buffer at most half used is handed over as a
   * copy of its used words, and kept for the next batches; a fuller one is handed over itself, and a fresh one
   * started. Why: the receiving thread counts every transferred byte as its young generation's off-heap memory,
   * and V8 collects that generation inside the next fresh allocation once it passes 32 MiB (BENCHMARKS.md,
   * "Twenty-fifth round"). A thread posting once a turn used to hand over 64 KiB however little it had packed.
   */
  take(): PackedBatches {
    const bytes = this.#at * 8;
    const keep = bytes * 2 <= this.#buf.byteLength;
    const buffer = keep ? this.#buf.slice(0, bytes) : this.#buf;
    const out = { buffer, words: this.#at, extras: this.#extras, errors: this.#errors, salts: this.#salts };
    if (keep) this.#reset();
    else this.#fresh(0);
    return out;
  }

  #fresh(words: number): void {
    this.#buf = new ArrayBuffer(Math.max(this.#minBytes, words * 8));
    this.#u32 = new Uint32Array(this.#buf);
    this.#u64 = new BigUint64Array(this.#buf);
    this.#f64 = new Float64Array(this.#buf);
    this.#reset();
  }

  /** Empties the current buffer for the next batches (its words are overwritten before they are read). */
  #reset(): void {
    this.#at = 0;
    this.#batches = 0;
    this.#extras = [];
    this.#errors = [];
    this.#salts = [];
    this.#saltIds.clear();
  }
}

/** The event's rare fields that are set (an absent one stays absent, as the decoder leaves it). */
function storedExtras(ev: StoredBlocksEvent): StoredExtras {
  const out: Record<string, unknown> = {};
  for (const k of EXTRA_FIELDS) if (ev[k] !== undefined) out[k] = ev[k];
  return out as StoredExtras;
}

/** Rebuilds every batch of `packed`, in order, as objects over views of its buffer, and hands each to `visit`. */
export function unpackBatches(
  packed: PackedBatches,
  visit: (id: number, seq: bigint, batch: KvEventBatch) => void,
): void {
  eachPackedBatch(packed, (id, seq, batch) =>
    visit(id, seq, { ts: batch.ts, dpRank: batch.dpRank, events: batch.events, errors: batch.errors }),
  );
}
