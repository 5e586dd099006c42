/**
 * Scoring and picking: one decision over the candidates in
 * `scratch.eligible[0..n)`. Matches overlap, resolves the request's effective
 * knobs once, scores every candidate with the cost model into
 * `scratch.costs` (and the decision's breakdown rows), picks one (argmin with
 * uniform ties, or softmax sampling with a temperature), books it unless the
 * mode is `query`, and returns the explained decision.
 */
import type { Clock, Rng, WorkerRole } from '../../common/index.js';
import type { ActiveSequences } from '../active-sequences.js';
import type { KvRouterConfig } from '../config.js';
import { costFromCredit, creditDecay, creditOf, newCostInput, type CostInput, type CostKnobs } from '../cost.js';
import { newStepCostLoad, stepCostOf, type StepCostLoad, type StepCostModel } from '../step-cost.js';
import { RoutingDecision, takeBreakdown, writeBreakdown, writeProbability } from '../decision.js';
import { LowestCost, pickLowest, sampleIndex, softmaxProbabilities } from '../selection.js';
import type { Booker } from './booking.js';
import { costKnobsOf, effectiveKnobs, type EffectiveKnobs, type WeightedScorer } from './knobs.js';
import type { OverlapMatcher } from './overlap.js';
import type { SlotTable } from './slots.js';
import type { SchedulingRequest, SelectionMode } from './types.js';

/** What a selector is built from; every piece is shared with the scheduler that owns it. */
export interface SlotSelectorOptions {
  readonly config: KvRouterConfig;
  readonly role: WorkerRole;
  readonly blockSize: number;
  readonly table: SlotTable;
  readonly active: ActiveSequences;
  readonly matcher: OverlapMatcher;
  readonly booker: Booker;
  readonly clock: Clock;
  readonly rng: Rng;
  /** The engines' step profile: with one, the cost is the predicted ms of `step-cost.ts`. */
  readonly stepCost?: StepCostModel | undefined;
}

export class SlotSelector {
  readonly #p: SlotSelectorOptions;
  /** The candidates' prefill load for the decision being made (`ActiveSequences.prefillTokensNow`). */
  #prefill: Float64Array = new Float64Array(0);

  constructor(parts: SlotSelectorOptions) {
    this.#p = parts;
  }

  /**
   * Scores `scratch.eligible[0..n)`, picks one, and books it unless `mode` is `query`.
   * `t0` is when the attempt started (for timing); `queuedMs` the time spent parked.
   */
  decide(req: SchedulingRequest, n: number, mode: SelectionMode, t0: number, queuedMs: number): RoutingDecision {
    const { clock, table, config } = this.#p;
    const tiered = this.#p.matcher.match(req, n);
    this.#prefill = this.#p.active.prefillTokensNow(table.scratch.eligible, n);
    const t1 = clock.now();
    const knobs = effectiveKnobs(config, this.#p.role, req.override, req.hashes !== null, tiered);
    const breakdown = takeBreakdown(n);
    // The cost model's loop picks the lowest as it scores (argmin); softmax and the other rules pick after.
    const lowest = knobs.scorer === null && !knobs.lmetric && !(knobs.temperature > 0) ? new LowestCost() : null;
    const maxOverlap =
      knobs.scorer !== null
        ? this.#scoreWeighted(req, n, knobs.scorer, breakdown)
        : knobs.lmetric
          ? this.#scoreLmetric(req, n, breakdown)
          : this.#score(req, n, knobs, tiered, breakdown, lowest);
    const pick = lowest !== null ? lowest.index : this.#pick(n, knobs.temperature, breakdown);
    const scratch = table.scratch;
    const slot = scratch.eligible[pick]!;
    const overlap = scratch.dev[slot]!;
    const booked = mode === 'book';
    const prefillTokens = booked ? this.#p.booker.book(req, slot, overlap, knobs) : 0;
    const t2 = clock.now();
    const hashingMs = req.hashingMs ?? 0;
    return new RoutingDecision({
      requestId: req.requestId,
      workerId: table.slotWorker[slot]!,
      dpRank: table.slotRank[slot]!,
      overlapBlocks: overlap,
      maxOverlapBlocks: maxOverlap,
      requiredBlocks: Math.ceil(req.isl / this.#p.blockSize),
      isl: req.isl,
      prefillTokens,
      cost: lowest !== null ? lowest.cost : scratch.costs[pick]!,
      booked,
      pinned: req.pinWorkerId !== undefined,
      temperature: knobs.temperature,
      timing: { hashingMs, matchingMs: t1 - t0, schedulingMs: t2 - t1, totalMs: hashingMs + (t2 - t0) },
      queuedMs,
      breakdown,
      candidateCount: n,
    });
  }

  /**
   * Writes every candidate's cost to its breakdown row and either offers it to `lowest` (the argmin pick,
   * when there is one to make) or writes it to `scratch.costs` (for softmax). Returns the largest overlap.
   * One pass over the slots' typed arrays with every request-wide input hoisted: the cost formula's
   * functions take scalars, so nothing is stored to an object per candidate (the time-unit cost, which
   * reads a `CostInput`, fills one only when the engines' step profile is known).
   */
  #score(
    req: SchedulingRequest,
    n: number,
    knobs: EffectiveKnobs,
    tiered: boolean,
    breakdown: Float64Array,
    lowest: LowestCost | null,
  ): number {
    const { table, active, rng, blockSize: bs } = this.#p;
    const isl = req.isl;
    const promptBlocks = req.hashes !== null ? req.hashes.seq.length : Math.floor(isl / bs);
    const { eligible: elig, dev, depth, host, disk, costs, sharedDepth } = table.scratch;
    const { activeDecodeBlocks: blocks, activeRequests: requests } = active;
    const prefill = this.#prefill;
    const { slotWorker, slotRank } = table;
    // The blocks the prompt adds where none of it is active (shareable: less the depth active there).
    const newBlocks = knobs.trackActiveBlocks ? promptBlocks : 0;
    const shareable = knobs.trackActiveBlocks && knobs.shareable;
    const minPrefill = minOver(prefill, elig, n);
    // A local copy of the knobs that never escapes, so the optimiser keeps its fields in registers.
    const k = costKnobsOf(knobs);
    const requestBlocks = Math.ceil(isl / bs);
    const preferred = req.routingConstraints?.preferredTaints;
    // Cache pressure and the KV overflow (both cost models' wait for KV) read advertised capacities, where known.
    const capacities = !knobs.decodeException && table.knownCapacityCount > 0;
    const pressure = capacities && (knobs.kvPressureWeight ?? 0) > 0;
    // The time-unit cost when the engines' step profile is known (the decode exception keeps [v1.5]).
    const model = knobs.decodeException ? undefined : this.#p.stepCost;
    const x = model === undefined ? undefined : this.#costInput(isl, requestBlocks, minPrefill);
    const load = x === undefined ? undefined : this.#stepCostLoad();
    const minOverflow = capacities && x === undefined ? this.#minOverflow(n, newBlocks, shareable, knobs) : 0;
    let maxOverlap = 0;
    for (let i = 0; i < n; i++) {
      const s = elig[i]!;
      const overlap = dev[s]!;
      const decodeBlocks = decodeBlocksAt(blocks, depth, s, newBlocks, shareable);
      const p = prefill[s]!;
      const activeRequests = requests[s]!;
      const uncached = isl - overlap * bs;
      const prefillTokens = k.trackPrefillTokens ? p + (uncached > 0 ? uncached : 0) : p;
      const evicted = pressure ? table.evictedBlocks(s, requestBlocks - overlap) : 0;
      const overflow = capacities ? table.overflowBlocks(s, decodeBlocks) - minOverflow : 0;
      const hostOverlap = tiered ? host[s]! : 0;
      const diskOverlap = tiered ? disk[s]! : 0;
      const sharedBeyond = tiered && sharedDepth > overlap ? sharedDepth - overlap : 0;
      const decay = creditDecay(k, p, minPrefill, bs, requestBlocks);
      const creditBlocks = creditOf(k, decay, overlap, hostOverlap, diskOverlap, sharedBeyond);
      let cost: number;
      if (x === undefined) {
        cost = costFromCredit(k, creditBlocks, isl, bs, p, decodeBlocks, activeRequests, evicted, overflow);
      } else {
        x.activePrefill = p;
        x.potentialDecodeBlocks = decodeBlocks;
        x.activeRequests = activeRequests;
        x.deviceOverlap = overlap;
        x.evicted = evicted;
        x.overflow = overflow;
        x.hostOverlap = hostOverlap;
        x.diskOverlap = diskOverlap;
        x.sharedBeyond = sharedBeyond;
        cost = this.#stepCost(k, model!, x, load!, s);
      }
      if (preferred !== undefined) cost *= table.taintFactor(s, preferred);
      if (overlap > maxOverlap) maxOverlap = overlap;
      if (lowest !== null) lowest.offer(i, cost, rng);
      else costs[i] = cost;
      writeBreakdown(
        breakdown,
        i,
        slotWorker[s]!,
        slotRank[s]!,
        overlap,
        prefillTokens,
        decodeBlocks,
        activeRequests,
        cost,
      );
    }
    return maxOverlap;
  }

  /**
   * The least KV overflow over the candidates `eligible[0..n)` (blocks beyond the advertised capacity, as
   * `#score` counts them), which block counting subtracts from each (0 with the term off). Where every
   * candidate overflows, the prompt waits for KV wherever it goes, so each is charged only its overflow
   * beyond the least one: the candidates' cached blocks count against each other again instead of all
   * being voided at once.
   */
  #minOverflow(n: number, newBlocks: number, shareable: boolean, knobs: EffectiveKnobs): number {
    if (!((knobs.kvOverflowWeight ?? 0) > 0)) return 0;
    const { table, active } = this.#p;
    const { eligible: elig, depth } = table.scratch;
    const blocks = active.activeDecodeBlocks;
    let least = Infinity;
    for (let i = 0; i < n && least > 0; i++) {
      const s = elig[i]!;
      const o = table.overflowBlocks(s, decodeBlocksAt(blocks, depth, s, newBlocks, shareable));
      if (o < least) least = o;
    }
    return least === Infinity ? 0 : least;
  }

  /** The request-wide part of a `CostInput` (the time-unit cost's; its per-candidate fields are refilled per slot). */
  #costInput(isl: number, requestBlocks: number, minActivePrefill: number): CostInput {
    const x = newCostInput();
    x.isl = isl;
    x.blockSize = this.#p.blockSize;
    x.requestBlocks = requestBlocks;
    x.minActivePrefill = minActivePrefill;
    return x;
  }

  /** The time-unit cost's per-decision load record (its per-slot fields are refilled per slot). */
  #stepCostLoad(): StepCostLoad {
    const load = newStepCostLoad();
    load.meanServiceMs = this.#p.active.meanServiceMs;
    return load;
  }

  /** The time-unit cost of slot `s` (`x` already filled for it; `load` refilled here). */
  #stepCost(k: CostKnobs, model: StepCostModel, x: CostInput, load: StepCostLoad, s: number): number {
    const table = this.#p.table;
    load.activeBlocks = this.#p.active.activeDecodeBlocks[s]!;
    load.maxBatched = table.maxBatched[s]!;
    return stepCostOf(k, model, x, load);
  }

  /**
   * The llm-d-style weighted scorer (its "optimized baseline": prefix, queue and KV-utilisation
   * scorers, each in [0, 1], weighted and summed; the highest score wins). Prefix: the share of the
   * prompt's blocks cached there. Queue: the prefill tokens booked there and not yet computed,
   * min-max normalised so the least queued scores 1 (llm-d reads the engine's waiting requests; the
   * router's own booking is its closest measure). KV utilisation: 1 − the active blocks over the
   * advertised capacity (1 when unknown). The cost written is the negated score, so picking (argmin,
   * uniform ties; or softmax) and the explanation stay those of the cost model. Returns the largest overlap.
   */
  #scoreWeighted(req: SchedulingRequest, n: number, w: WeightedScorer, breakdown: Float64Array): number {
    const { table, active } = this.#p;
    const promptBlocks = req.hashes !== null ? req.hashes.seq.length : Math.floor(req.isl / this.#p.blockSize);
    const { eligible: elig } = table.scratch;
    const prefill = this.#prefill;
    const blocks = active.activeDecodeBlocks;
    let minQ = Infinity;
    let maxQ = -Infinity;
    for (let i = 0; i < n; i++) {
      const q = prefill[elig[i]!]!;
      if (q < minQ) minQ = q;
      if (q > maxQ) maxQ = q;
    }
    return this.#scoreBy(req, n, breakdown, (s, overlap) => {
      const prefixScore = promptBlocks > 0 ? Math.min(1, overlap / promptBlocks) : 0;
      const queueScore = maxQ > minQ ? (maxQ - prefill[s]!) / (maxQ - minQ) : 1;
      const capacity = table.totalKv[s]!;
      const kvScore = capacity > 0 ? Math.max(0, 1 - blocks[s]! / capacity) : 1;
      return -(w.prefix * prefixScore + w.queue * queueScore + w.kvUtilization * kvScore);
    });
  }

  /**
   * LMetric (Zhang et al., OSDI'26): the product of a cache indicator, the prefill tokens the worker
   * would compute if routed there (its queued prefill plus the prompt's uncached tokens), and a load
   * indicator, its batch size; the lowest wins, with no weight to tune (scales cancel in the product).
   * The batch counts the request itself (active requests + 1), so an idle worker is not scored 0
   * whatever its cache holds (the product's degenerate case the paper warns of). Returns the largest overlap.
   */
  #scoreLmetric(req: SchedulingRequest, n: number, breakdown: Float64Array): number {
    const requests = this.#p.active.activeRequests;
    return this.#scoreBy(req, n, breakdown, (s, _overlap, prefillTokens) => prefillTokens * (requests[s]! + 1));
  }

  /**
   * The loop the alternative rules share: each candidate's cost from `rule` (slot, overlap, prefill
   * tokens if routed there), a preferred taint's factor applied so that a factor below 1 favours the
   * worker whatever the cost's sign, and its breakdown row. Returns the largest overlap.
   */
  #scoreBy(
    req: SchedulingRequest,
    n: number,
    breakdown: Float64Array,
    rule: (slot: number, overlap: number, prefillTokens: number) => number,
  ): number {
    const { table, active } = this.#p;
    const { eligible: elig, dev, costs } = table.scratch;
    const prefill = this.#prefill;
    const preferred = req.routingConstraints?.preferredTaints;
    let maxOverlap = 0;
    for (let i = 0; i < n; i++) {
      const s = elig[i]!;
      const overlap = dev[s]!;
      if (overlap > maxOverlap) maxOverlap = overlap;
      const uncached = req.isl - overlap * this.#p.blockSize;
      const prefillTokens = prefill[s]! + (uncached > 0 ? uncached : 0);
      let cost = rule(s, overlap, prefillTokens);
      if (preferred !== undefined) {
        const f = table.taintFactor(s, preferred);
        cost = cost >= 0 ? cost * f : cost / f;
      }
      costs[i] = cost;
      const [worker, rank] = [table.slotWorker[s]!, table.slotRank[s]!];
      writeBreakdown(
        breakdown,
        i,
        worker,
        rank,
        overlap,
        prefillTokens,
        active.activeDecodeBlocks[s]!,
        active.activeRequests[s]!,
        cost,
      );
    }
    return maxOverlap;
  }

  /** Picks a candidate index: the only one, a softmax sample (temperature > 0), or the lowest cost with uniform ties. */
  #pick(n: number, temperature: number, breakdown: Float64Array): number {
    if (n === 1) {
      if (temperature > 0) writeProbability(breakdown, 0, 1);
      return 0;
    }
    const { costs, probs } = this.#p.table.scratch;
    if (temperature > 0) {
      softmaxProbabilities(costs, n, temperature, probs);
      for (let i = 0; i < n; i++) writeProbability(breakdown, i, probs[i]!);
      return sampleIndex(probs, n, this.#p.rng);
    }
    return pickLowest(costs, n, this.#p.rng);
  }
}

/** The smallest of `values` over the slots `slots[0..n)`. */
function minOver(values: Float64Array, slots: Int32Array, n: number): number {
  let min = Infinity;
  for (let i = 0; i < n; i++) {
    const v = values[slots[i]!]!;
    if (v < min) min = v;
  }
  return min;
}

/**
 * The decode blocks slot `s` would hold with the request: its active blocks plus the prompt's new ones (less the
 * depth of the prompt already active there, when active blocks are shared). One rule for the cost and the least
 * overflow, which must count alike.
 */
function decodeBlocksAt(
  blocks: Float64Array,
  depth: Float64Array,
  s: number,
  newBlocks: number,
  shareable: boolean,
): number {
  return blocks[s]! + (shareable ? newBlocks - depth[s]! : newBlocks);
}
