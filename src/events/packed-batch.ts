/**
 * The main thread's side of the ingestion threads' hand-over (the layout is batch-codec.ts's): a batch
 * handed over stays in the transferred buffer as a `PackedBatch`, and its events are applied straight
 * from that buffer (`PackedEvent`, one record reused for every event) without building an object per
 * event. Whoever needs the events as objects (a hybrid model's groups, an Eagle event, a rare field,
 * tests) gets them from `events`, built once, equal to what the decoder made.
 *
 * Contract of `PackedEvent`: its fields describe the event last read into it and stay valid until the
 * next read. Its hash arrays are the record's own scratch arrays, overwritten by the next read (no
 * array is made per event), so a consumer copies what it keeps (the prefix index copies them into
 * the module at once).
 */
import {
  STORAGE_TIERS,
  type KvCacheEvent,
  type KvCacheEventType,
  type KvEventBatch,
  type KvEventDecodeError,
  type StorageTier,
  type StoredBlocksEvent,
} from './types.js';

export const KIND_STORED = 0;
export const KIND_REMOVED = 1;
export const KIND_CLEARED = 2;
/** `local` count of a stored event packed without its own hashes. */
export const NO_LOCALS = 0xffffffff;

/** A stored event's fields that most events leave at their default. */
export type StoredExtras = Pick<
  StoredBlocksEvent,
  | 'loraName'
  | 'loraId'
  | 'cacheSalt'
  | 'mmHashes'
  | 'extraKeyStrings'
  | 'specKind'
  | 'slidingWindow'
  | 'leadingNullBlocks'
  | 'eagleNextToken'
>;

/** Packed batches as posted by an ingestion thread (`buffer` is transferred). */
export interface PackedBatches {
  readonly buffer: ArrayBuffer;
  /** 8-byte words of `buffer` in use. */
  readonly words: number;
  readonly extras: readonly StoredExtras[];
  readonly errors: readonly (readonly KvEventDecodeError[])[];
  /** The salts the thread inferred and hashed stored events with (batch-hasher.ts), by index + 1 in the event. */
  readonly salts: readonly string[];
}

/** The views one buffer is read through, shared by every batch in it. */
class PackedViews {
  readonly u32: Uint32Array;
  readonly u64: BigUint64Array;
  readonly f64: Float64Array;

  constructor(readonly packed: PackedBatches) {
    this.u32 = new Uint32Array(packed.buffer, 0, packed.words * 2);
    this.u64 = new BigUint64Array(packed.buffer, 0, packed.words);
    this.f64 = new Float64Array(packed.buffer, 0, packed.words);
  }
}

const NO_HASHES = new BigUint64Array(0);

/** Scratch arrays by length (short hash lists, the common case, are copied rather than viewed). */
const SCRATCH_MAX = 64;

class Scratch {
  /** By length: the array handed out, and its 32-bit halves that are written. */
  readonly #byLength: ({ u64: BigUint64Array; u32: Uint32Array } | undefined)[] = [];

  /** `n` hashes from word `at` of `v`: a scratch array, or a view of the buffer for a long list. */
  fill(v: PackedViews, at: number, n: number): BigUint64Array {
    if (n > SCRATCH_MAX) return new BigUint64Array(v.packed.buffer, at * 8, n);
    let out = this.#byLength[n];
    if (out === undefined) {
      const u64 = new BigUint64Array(n);
      this.#byLength[n] = out = { u64, u32: new Uint32Array(u64.buffer) };
    }
    // Copied as 32-bit halves: reading a u64 element would allocate a BigInt each.
    const dst = out.u32;
    const src = v.u32;
    for (let i = 0, j = 2 * at; i < 2 * n; i++, j++) dst[i] = src[j]!;
    return out.u64;
  }
}

/** One event of a packed batch, read in place (see the contract in the header). */
export class PackedEvent {
  type: KvCacheEventType = 'cleared';
  tier: StorageTier = 'device';
  groupIdx = 0;
  parentHash: bigint | null = null;
  blockHashes: BigUint64Array = NO_HASHES;
  /** Hashes of the event (`blockHashes.length`, unless it was skimmed). */
  hashCount = 0;
  /** The stored blocks' own hashes, when the thread computed them. */
  localHashes: BigUint64Array | undefined = undefined;
  /**
   * The salt the thread inferred and computed `localHashes` with, beside the event's own fields (a guess:
   * batch-hasher.ts); undefined for none. The object form (`event()`) leaves such hashes out.
   */
  localSalt: string | undefined = undefined;
  blockSize = 0;
  droppedBlocks = 0;
  /** No rare field is set (no LoRA, salt, multimodal hashes, group spec, null blocks or Eagle token). */
  plain = true;
  #views: PackedViews | undefined;
  #word = 0;
  readonly #hashes = new Scratch();
  readonly #locals = new Scratch();

  /**
   * Reads the event at word `w` of `v`; returns the word after it. `hashes` false leaves its hash arrays out
   * (`blockHashes` empty, `localHashes` undefined): a look at its kind, parent and salt (`PackedBatch.skim`).
   */
  read(v: PackedViews, w: number, hashes = true): number {
    this.#views = v;
    this.#word = w;
    const u32 = v.u32;
    const head = u32[2 * w]!;
    const kind = head & 0xff;
    this.type = kind === KIND_STORED ? 'stored' : kind === KIND_REMOVED ? 'removed' : 'cleared';
    if (kind === KIND_CLEARED) return w + 1;
    this.tier = STORAGE_TIERS[(head >> 8) & 0xff]!;
    this.groupIdx = v.f64[w + 1]!;
    const n = u32[2 * (w + 2)]!;
    this.hashCount = n;
    if (kind === KIND_REMOVED) {
      this.blockHashes = hashes ? this.#hashes.fill(v, w + 3, n) : NO_HASHES;
      return w + 3 + n;
    }
    const localCount = u32[2 * (w + 2) + 1]!;
    const tokens = u32[2 * (w + 3)]!;
    this.blockSize = u32[2 * (w + 3) + 1]!;
    this.droppedBlocks = u32[2 * (w + 4)]!;
    this.plain = u32[2 * (w + 4) + 1] === 0;
    this.parentHash = (head >> 16) & 1 ? v.u64[w + 5]! : null;
    let at = w + 6;
    this.blockHashes = hashes ? this.#hashes.fill(v, at, n) : NO_HASHES;
    at += n;
    this.localHashes = undefined;
    const salt = u32[2 * w + 1]!;
    this.localSalt = salt === 0 ? undefined : v.packed.salts[salt - 1];
    if (localCount !== NO_LOCALS) {
      if (hashes) this.localHashes = this.#locals.fill(v, at, localCount);
      at += localCount;
    }
    return at + Math.ceil(tokens / 2);
  }

  /** The event last read, as the decoder would have made it (with its own hashes, if packed). */
  event(): KvCacheEvent {
    return readEvent(this.#views!, this.#word).event;
  }
}

/** A batch handed over by an ingestion thread, its events still in the transferred buffer. */
export class PackedBatch implements KvEventBatch {
  readonly ts: number;
  readonly dpRank: number | null;
  readonly errors: readonly KvEventDecodeError[];
  /** Events in the batch. */
  readonly count: number;
  /** Some stored event's local hashes were computed with a salt the thread inferred (`PackedEvent.localSalt`). */
  readonly salted: boolean;
  /** The word of its first event. */
  readonly firstWord: number;
  readonly #views: PackedViews;
  readonly #end: number;
  #events: readonly KvCacheEvent[] | undefined;

  constructor(views: PackedViews, w: number) {
    const { u32, f64 } = views;
    this.#views = views;
    this.count = u32[2 * w + 1]!;
    this.ts = f64[w + 2]!;
    const rank = u32[2 * (w + 3)]!;
    this.dpRank = rank === 0 ? null : rank - 1;
    const errs = u32[2 * (w + 3) + 1]!;
    this.errors = errs === 0 ? [] : views.packed.errors[errs - 1]!;
    this.firstWord = w + 5;
    this.#end = w + u32[2 * (w + 4)]!;
    this.salted = u32[2 * (w + 4) + 1] !== 0;
  }

  /** Reads the event at `w` into `into`; returns the word of the next one. */
  read(w: number, into: PackedEvent): number {
    return into.read(this.#views, w);
  }

  /** Reads the event at `w` into `into` without its hashes (`PackedEvent.read`); returns the word of the next one. */
  skim(w: number, into: PackedEvent): number {
    return into.read(this.#views, w, false);
  }

  /** The hand-over buffer as 32-bit words, two per packed word (what a packed run copies into the module). */
  get u32(): Uint32Array {
    return this.#views.u32;
  }

  /** The events as objects, built on first use. */
  get events(): readonly KvCacheEvent[] {
    if (this.#events !== undefined) return this.#events;
    const out = new Array<KvCacheEvent>(this.count);
    let w = this.firstWord;
    for (let i = 0; i < this.count; i++) {
      const r = readEvent(this.#views, w);
      out[i] = r.event;
      w = r.next;
    }
    return (this.#events = out);
  }

  /** The word after the batch's last event. */
  end(): number {
    return this.#end;
  }
}

/** Hands every batch of `packed`, in order, to `visit` (the stream id it was packed for, its seq, the batch). */
export function eachPackedBatch(
  packed: PackedBatches,
  visit: (id: number, seq: bigint, batch: PackedBatch) => void,
): void {
  const views = new PackedViews(packed);
  let w = 0;
  while (w < packed.words) {
    const batch = new PackedBatch(views, w);
    const id = views.u32[2 * w]!;
    const seq = views.u64[w + 1]!;
    w = batch.end();
    visit(id, seq, batch);
  }
}

const CLEARED: KvCacheEvent = Object.freeze({ type: 'cleared' });

function readEvent(v: PackedViews, w: number): { event: KvCacheEvent; next: number } {
  const { u32, u64, f64 } = v;
  const head = u32[2 * w]!;
  const kind = head & 0xff;
  if (kind === KIND_CLEARED) return { event: CLEARED, next: w + 1 };
  const tier = STORAGE_TIERS[(head >> 8) & 0xff]!;
  const groupIdx = f64[w + 1]!;
  const buffer = v.packed.buffer;
  const hashes = u32[2 * (w + 2)]!;
  if (kind === KIND_REMOVED) {
    const blockHashes = new BigUint64Array(buffer, (w + 3) * 8, hashes);
    return { event: { type: 'removed', tier, blockHashes, groupIdx }, next: w + 3 + hashes };
  }
  const localCount = u32[2 * (w + 2) + 1]!;
  const tokens = u32[2 * (w + 3)]!;
  const extrasAt = u32[2 * (w + 4) + 1]!;
  const extras = extrasAt === 0 ? undefined : v.packed.extras[extrasAt - 1];
  let at = w + 6;
  const blockHashes = new BigUint64Array(buffer, at * 8, hashes);
  at += hashes;
  let localHashes: BigUint64Array | undefined;
  if (localCount !== NO_LOCALS) {
    // Hashes computed with a salt the thread inferred are left out: the applier infers its own and takes them
    // from the record (`PackedEvent.localHashes`) only where it infers the same.
    if (u32[2 * w + 1] === 0) localHashes = new BigUint64Array(buffer, at * 8, localCount);
    at += localCount;
  }
  const event: StoredBlocksEvent = {
    type: 'stored',
    tier,
    parentHash: (head >> 16) & 1 ? u64[w + 5]! : null,
    blockHashes,
    tokenIds: new Uint32Array(buffer, at * 8, tokens),
    blockSize: u32[2 * (w + 3) + 1]!,
    droppedBlocks: u32[2 * (w + 4)]!,
    loraName: undefined,
    loraId: undefined,
    cacheSalt: undefined,
    mmHashes: undefined,
    groupIdx,
    ...extras,
    ...(localHashes === undefined ? {} : { localHashes }),
  };
  return { event, next: at + Math.ceil(tokens / 2) };
}
