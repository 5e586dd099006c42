/**
 * KV events applied straight from an ingestion thread's hand-over buffer: one WASM call reads a run of one
 * slot's events in the layout src/events/batch-codec.ts packs (`idxApplyPacked`, assembly/index.ts) instead
 * of one call, one copy and one status per event crossing the boundary. The events it takes are the common
 * ones (a device-tier `removed` or plain `stored` of the index's group); it stops before any other, for the
 * host to apply that one as it always did, and the run goes on after it.
 */
import type { WasmModule } from './instance.js';

/** One outcome byte per event of a run. */
export const PackedOutcome = {
  /** `stored` applied; `stored + 1` its parent was not held, `stored + 2` it repeats a block hash. */
  stored: 0,
  parentNotFound: 1,
  invalidSequence: 2,
  /** `stored` applied, the engine having dropped some of its blocks. */
  truncated: 3,
  blockSizeMismatch: 4,
  removed: 8,
  /** `removed`, some of its hashes not held by the slot. */
  notFound: 9,
} as const;

/** Why a run stopped before its `maxEvents`. */
export const PackedStop = {
  /** It applied what was asked. */
  done: 0,
  /** The next event is one the module leaves to the host (a `cleared`, another tier or group, a rare field). */
  host: 1,
  /** The next event does not end inside the words copied: the caller copies on from `next`. */
  range: 2,
  /** A stored event took the index past its memory budget (or under its episode's end): the owner enforces it. */
  budget: 3,
} as const;

/**
 * What a run did; one record, owned by the caller and filled by each run (no allocation per run).
 * `outcomes[0, events)` hold the events' `PackedOutcome`s until the next run.
 */
export class PackedRun {
  events = 0;
  /** The word (of the hand-over buffer) where the next event starts. */
  next = 0;
  stop: number = PackedStop.done;
  outcomes = new Uint8Array(64);
}

/** What a run reads and how: the source words, the range, and the checks the module applies. */
export interface PackedSource {
  /** The hand-over buffer as 32-bit words (two per packed 8-byte word). */
  readonly u32: Uint32Array;
  /** The packed words of the run: [from, end), `end` the batch's end. */
  readonly from: number;
  readonly end: number;
  readonly maxEvents: number;
  /** The index's KV-cache group, and the router's block size. */
  readonly group: number;
  readonly blockSize: number;
}

/** Packed words copied per event expected (stored events of a few blocks with their tokens), before a range stop copies on. */
const WORDS_PER_EVENT = 48;

/**
 * One `idxApplyPacked` call on index `ix`: copies the run's words into the module (as many as `maxEvents`
 * events likely span, the rest after a `range` stop) and fills `run`. `budget`/`low` as the module takes them.
 */
export function applyPackedRun(
  m: WasmModule,
  ix: number,
  slot: number,
  src: PackedSource,
  budget: number,
  low: number,
  run: PackedRun,
): void {
  const rest = src.end - src.from;
  const words = Math.min(rest, Math.max(16, src.maxEvents * WORDS_PER_EVENT));
  call(m, ix, slot, src, words, budget, low, run);
  // An event larger than the words guessed (a long prompt's blocks and tokens): the rest of the batch, once.
  if (run.events === 0 && run.stop === PackedStop.range && words < rest) call(m, ix, slot, src, rest, budget, low, run);
}

function call(
  m: WasmModule,
  ix: number,
  slot: number,
  src: PackedSource,
  words: number,
  budget: number,
  low: number,
  run: PackedRun,
): void {
  const io = m.reserve(words * 8 + src.maxEvents + 16);
  m.views().u32.set(src.u32.subarray(2 * src.from, 2 * (src.from + words)), io >>> 2);
  // The words at [io, wordsEnd), then the stop reason and next offset (8 bytes), then the outcome bytes.
  const wordsEnd = io + words * 8;
  const state = wordsEnd;
  const outcomes = state + 8;
  const events = m.exports.idxApplyPacked(
    ix,
    slot,
    io,
    wordsEnd,
    src.maxEvents,
    src.group,
    src.blockSize,
    budget,
    low,
    outcomes,
    state,
  );
  const v = m.views();
  if (run.outcomes.length < events) run.outcomes = new Uint8Array(Math.max(events, 2 * run.outcomes.length));
  run.outcomes.set(v.u8.subarray(outcomes, outcomes + events));
  run.events = events;
  run.stop = v.u32[state >>> 2]!;
  run.next = src.from + v.u32[(state >>> 2) + 1]! / 8;
}
