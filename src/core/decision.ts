/**
 * The result of one routing decision, able to explain itself: the chosen
 * (worker, dp_rank), its overlap, and every candidate's inputs and cost.
 *
 * The per-candidate breakdown is kept as one flat Float64Array (stride
 * `BREAKDOWN_STRIDE`) so a decision allocates O(1) objects however many
 * candidates there were; `candidates` materialises objects on demand (logs,
 * query-only responses, tests). The arrays are views carved from shared
 * 1 MiB chunks (`takeBreakdown`): a fresh multi-KiB typed array per decision
 * costs an off-heap allocation and its finalisation, which measured as the
 * largest single cost of scoring 64 candidates. The chunks are `CarvedSlabs`:
 * each made ahead, off the decision, and not zeroed, since every scoring loop
 * writes each row whole (`writeBreakdown`, the probability 0 until softmax
 * writes it): `breakdown` is public, and holds nothing a decision did not write.
 */
import { CarvedSlabs, type WorkerRank } from '../common/index.js';

/** Where the time of one decision went, in milliseconds (Dynamo's `dynamo_router_overhead_*_ms`). */
export interface DecisionTiming {
  /** Block + sequence hashing of the prompt (0 when the caller passed hashes). */
  readonly hashingMs: number;
  /** Prefix-index lookups: events index, predict-on-route and tier indexes, active-block depths. */
  readonly matchingMs: number;
  /** Cost scoring, selection and booking. */
  readonly schedulingMs: number;
  /** Sum of the above (time spent waiting in the queue excluded; see `queuedMs`). */
  readonly totalMs: number;
}

/** One candidate (worker, dp_rank) as the cost model saw it. */
export interface CandidateBreakdown extends WorkerRank {
  /** Effective device overlap in blocks (max of the events index and the predict-on-route index). */
  readonly overlapBlocks: number;
  /** Active prefill tokens plus this request's uncached tokens there (the prefill term's input). */
  readonly prefillTokens: number;
  /** Active decode blocks plus the request's blocks not already active there. */
  readonly decodeBlocks: number;
  readonly activeRequests: number;
  /** The cost ("logit"); lower is better. */
  readonly cost: number;
  /** Selection probability under softmax (temperature > 0); undefined at temperature 0. */
  readonly probability: number | undefined;
}

const BREAKDOWN_STRIDE = 8;
const CHUNK_BYTES = 1 << 20;

const chunks = new CarvedSlabs(CHUNK_BYTES);

/**
 * A breakdown array for `candidates` rows, carved from the current chunk (old
 * chunks live as long as a decision still views them). Its contents are
 * unspecified until the caller writes every row (`writeBreakdown`).
 */
export function takeBreakdown(candidates: number): Float64Array {
  const bytes = candidates * BREAKDOWN_STRIDE * 8;
  if (bytes > CHUNK_BYTES / 4) return new Float64Array(candidates * BREAKDOWN_STRIDE);
  const at = chunks.carve(bytes);
  return new Float64Array(chunks.buffer, at, candidates * BREAKDOWN_STRIDE);
}
const F_WORKER = 0;
const F_RANK = 1;
const F_OVERLAP = 2;
const F_PREFILL = 3;
const F_DECODE = 4;
const F_REQUESTS = 5;
const F_COST = 6;
const F_PROB = 7;

/**
 * Writes one candidate row (used by the scheduler's scoring loop).
 * @rank-numbers called per candidate in the scoring loop with the dense slot's columns, written into a Float64Array:
 *   a pair object per candidate would be garbage on the hottest path.
 */
export function writeBreakdown(
  out: Float64Array,
  i: number,
  workerId: number,
  dpRank: number,
  overlap: number,
  prefillTokens: number,
  decodeBlocks: number,
  activeRequests: number,
  cost: number,
): void {
  const o = i * BREAKDOWN_STRIDE;
  out[o + F_WORKER] = workerId;
  out[o + F_RANK] = dpRank;
  out[o + F_OVERLAP] = overlap;
  out[o + F_PREFILL] = prefillTokens;
  out[o + F_DECODE] = decodeBlocks;
  out[o + F_REQUESTS] = activeRequests;
  out[o + F_COST] = cost;
  // Softmax overwrites it: the row is written whole, so no byte of the unzeroed chunk is ever read unwritten.
  out[o + F_PROB] = 0;
}

export function writeProbability(out: Float64Array, i: number, p: number): void {
  out[i * BREAKDOWN_STRIDE + F_PROB] = p;
}

/** The fields a decision is built from, by name (everything but the derived views). */
export type RoutingDecisionOptions = Omit<RoutingDecision, 'candidates' | 'cachedTokens' | 'toJSON'>;

export class RoutingDecision {
  /** Context id the decision was made for. */
  readonly requestId: string;
  readonly workerId: number;
  readonly dpRank: number;
  /** Effective overlap of the chosen slot, in blocks. */
  readonly overlapBlocks: number;
  /** Largest effective overlap among the candidates (a choice below it trades cache hits for load). */
  readonly maxOverlapBlocks: number;
  /** `ceil(isl / block_size)`. */
  readonly requiredBlocks: number;
  /** Prompt length in tokens. */
  readonly isl: number;
  /** Uncached prompt tokens booked as prefill load (0 when not tracking prefill or not booked). */
  readonly prefillTokens: number;
  /** Cost of the chosen candidate. */
  readonly cost: number;
  /** True if the request was booked in the load bookkeeping (false for query-only). */
  readonly booked: boolean;
  /** True if a pin restricted the choice to one worker. */
  readonly pinned: boolean;
  /** Temperature used (after any per-request override). */
  readonly temperature: number;
  readonly timing: DecisionTiming;
  /** Milliseconds spent parked in the queue before admission (0 when admitted at once). */
  readonly queuedMs: number;
  /** Candidate rows, `BREAKDOWN_STRIDE` numbers each. */
  readonly breakdown: Float64Array;
  readonly candidateCount: number;

  constructor(init: RoutingDecisionOptions) {
    this.requestId = init.requestId;
    this.workerId = init.workerId;
    this.dpRank = init.dpRank;
    this.overlapBlocks = init.overlapBlocks;
    this.maxOverlapBlocks = init.maxOverlapBlocks;
    this.requiredBlocks = init.requiredBlocks;
    this.isl = init.isl;
    this.prefillTokens = init.prefillTokens;
    this.cost = init.cost;
    this.booked = init.booked;
    this.pinned = init.pinned;
    this.temperature = init.temperature;
    this.timing = init.timing;
    this.queuedMs = init.queuedMs;
    this.breakdown = init.breakdown;
    this.candidateCount = init.candidateCount;
  }

  /** Every candidate's inputs and cost, in scoring order. */
  get candidates(): CandidateBreakdown[] {
    const out: CandidateBreakdown[] = [];
    const b = this.breakdown;
    for (let i = 0; i < this.candidateCount; i++) {
      const o = i * BREAKDOWN_STRIDE;
      out.push({
        workerId: b[o + F_WORKER]!,
        dpRank: b[o + F_RANK]!,
        overlapBlocks: b[o + F_OVERLAP]!,
        prefillTokens: b[o + F_PREFILL]!,
        decodeBlocks: b[o + F_DECODE]!,
        activeRequests: b[o + F_REQUESTS]!,
        cost: b[o + F_COST]!,
        // Meaningful under softmax (temperature > 0) only, which writes it for every row.
        probability: this.temperature > 0 ? b[o + F_PROB]! : undefined,
      });
    }
    return out;
  }

  /** Cached prompt tokens on the chosen slot (`min(isl, overlapBlocks × block_size)`). */
  cachedTokens(blockSize: number): number {
    return Math.min(this.isl, this.overlapBlocks * blockSize);
  }

  toJSON(): Record<string, unknown> {
    return {
      requestId: this.requestId,
      workerId: this.workerId,
      dpRank: this.dpRank,
      overlapBlocks: this.overlapBlocks,
      maxOverlapBlocks: this.maxOverlapBlocks,
      requiredBlocks: this.requiredBlocks,
      isl: this.isl,
      prefillTokens: this.prefillTokens,
      cost: this.cost,
      booked: this.booked,
      pinned: this.pinned,
      temperature: this.temperature,
      timing: this.timing,
      queuedMs: this.queuedMs,
      candidates: this.candidates,
    };
  }
}
