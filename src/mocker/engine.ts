/**
 * EngineCore: one simulated vLLM-style engine (one data-parallel rank), pure and
 * clock-driven. No timers and no I/O: callers pass `now` (ms) and run
 * `step(now)` whenever the previous step's duration has elapsed, in real time
 * (RealtimeEngine) or virtual time (VirtualEngine).
 *
 * One step = one scheduler iteration of vLLM V1:
 *   1. running requests first, in order: each gets the tokens it still needs
 *      (1 when decoding; a chunk of the prompt when prefilling), within the
 *      token budget `maxNumBatchedTokens`; when the cache cannot hold the new tokens, a running
 *      request is preempted (the last admitted, or whom the `priority` policy picks: scheduling-policy.ts):
 *      its blocks are released, it is queued again and recomputed later (its cached blocks may serve it); a pass
 *      that only preempted is followed at once by the next, as vLLM's (an empty step reads as waiting for input);
 *   2. if nothing was preempted, waiting requests are admitted in queue order
 *      while `maxNumSeqs`, the budget and the cache allow: the prefix cache is
 *      looked up (at most floor((tokens - 1) / blockSize) blocks, as vLLM keeps
 *      one token to compute), the rest is allocated, and prefill starts
 *      (chunked when it exceeds the budget);
 *   3. the step's duration comes from the timing model over what was
 *      scheduled, divided by `speedup`; its effects (computed tokens, newly
 *      cached full blocks with their BlockStored events, one sampled token per
 *      request that reached the end of its known tokens, finished requests)
 *      are returned at once and are meant to become visible at now + duration.
 *
 * Hashes: prompt blocks are hashed with `promptHashes` (the router's local and
 * chained sequence hashes, XXH3 seed 1337 + LoRA/salt); generated blocks are
 * chained the same way as they fill. The KV cache is keyed by sequence hash.
 * KV events carry engine block hashes = XXH3-64(sequence hash as 8 bytes LE,
 * seed = engineHashSeed): opaque uint64 values that differ per engine seed, so
 * a router must rebuild its own hashes from `token_ids`, as with real vLLM.
 *
 * P/D: a request with `remotePrefill` gets its prompt's KV from elsewhere: on
 * admission its blocks are allocated and it waits `transferMs` (isl x
 * kvBytesPerToken / bandwidth / speedup, uncached tokens only), then all but
 * the last prompt token count as computed. A request with `holdBlocksMs` keeps
 * its blocks after finishing until `pullHeld` or the lease ends (vLLM's NIXL
 * prefill side).
 */
import { KvgateError } from '../errors/index.js';
import { commitFullBlocks, engineHash } from './block-commit.js';
import type {
  CoreRequest,
  EngineCoreOptions,
  EngineCoreStats,
  KvEvent,
  PullResult,
  SchedulingPolicy,
  StepResult,
} from './engine-types.js';
import { HeldLeases } from './held-leases.js';
import { HybridKvGroups } from './hybrid-groups.js';
import { KvBlockPool, type Block } from './kv-cache.js';
import { RequestEntry } from './request-entry.js';
import { enqueue, victimIndex } from './scheduling-policy.js';
import type { PrefillWork } from './timing.js';

/** A request scheduled in the current step and how many tokens it computes. */
type Scheduled = { readonly r: RequestEntry; readonly n: number };

function validatePositiveInt(name: string, v: number): void {
  if (!Number.isInteger(v) || v <= 0)
    throw new KvgateError('KVG_ERR_INVALID_CONFIG', `${name} must be a positive integer, got ${v}`, {
      field: name,
      value: v,
    });
}

export class EngineCore {
  readonly options: Readonly<EngineCoreOptions>;
  readonly #pool: KvBlockPool;
  /** A hybrid engine's KV-cache groups beyond the pool's (undefined: one full-attention group). */
  readonly #hybrid: HybridKvGroups | undefined;
  readonly #requests = new Map<string, RequestEntry>();
  readonly #waiting: RequestEntry[] = [];
  readonly #running: RequestEntry[] = [];
  readonly #policy: SchedulingPolicy;
  /** Blocks finished requests keep for a remote decode to pull. */
  readonly #held = new HeldLeases((blocks) => this.#releaseBlocks(blocks));
  /** Events produced outside a step (lease expiry, reset), delivered with the next step. */
  #pendingEvents: KvEvent[] = [];
  #stats = {
    prefixQueriedTokens: 0,
    prefixHitTokens: 0,
    preemptions: 0,
    promptTokens: 0,
    generationTokens: 0,
    steps: 0,
    extrapolatedSteps: 0,
    busyMs: 0,
  };

  /** @throws KvgateError KVG_ERR_INVALID_CONFIG for non-positive sizes or an empty sample vocabulary. */
  constructor(options: EngineCoreOptions) {
    validatePositiveInt('numGpuBlocks', options.numGpuBlocks);
    validatePositiveInt('blockSize', options.blockSize);
    validatePositiveInt('maxNumBatchedTokens', options.maxNumBatchedTokens);
    validatePositiveInt('maxNumSeqs', options.maxNumSeqs);
    if (!(options.speedup > 0))
      throw new KvgateError('KVG_ERR_INVALID_CONFIG', `speedup must be > 0, got ${options.speedup}`, {
        field: 'speedup',
      });
    if (options.sampleTokenIds.length === 0)
      throw new KvgateError('KVG_ERR_INVALID_CONFIG', 'sampleTokenIds is empty', { field: 'sampleTokenIds' });
    this.options = Object.freeze({ ...options });
    this.#policy = options.schedulingPolicy ?? 'fcfs';
    this.#pool = new KvBlockPool(options.numGpuBlocks, options.evictionPolicy);
    const groups = options.kvGroups ?? [];
    this.#hybrid = groups.length > 1 ? new HybridKvGroups(groups, options.blockSize, options.numGpuBlocks) : undefined;
  }

  /** The opaque uint64 published for a sequence hash. */
  engineHash(seqHash: bigint): bigint {
    return engineHash(seqHash, this.options.engineHashSeed);
  }

  /** Transfer delay for `tokens` of KV, in (scaled) ms. */
  transferMs(tokens: number): number {
    const o = this.options;
    return (((tokens * o.kvBytesPerToken) / o.kvTransferBandwidth) * 1000) / o.speedup;
  }

  /**
   * Queues a request.
   * @throws KvgateError KVG_ERR_INVALID_ARGUMENT for a duplicate id, an empty prompt,
   *   maxTokens < 1, a priority not an integer, or a request that can never fit in the cache.
   */
  add(req: CoreRequest, now: number): void {
    if (this.#requests.has(req.id) || this.#held.has(req.id)) {
      throw new KvgateError('KVG_ERR_INVALID_ARGUMENT', `request id ${req.id} is already in use`, {
        requestId: req.id,
      });
    }
    if (req.promptTokens.length === 0)
      throw new KvgateError('KVG_ERR_INVALID_ARGUMENT', 'the prompt is empty', { requestId: req.id });
    if (!Number.isInteger(req.maxTokens) || req.maxTokens < 1) {
      throw new KvgateError('KVG_ERR_INVALID_ARGUMENT', `max_tokens must be at least 1, got ${req.maxTokens}`, {
        requestId: req.id,
      });
    }
    const { blockSize, numGpuBlocks } = this.options;
    // The last generated token is never fed back, so it needs no KV.
    const needed = Math.ceil((req.promptTokens.length + req.maxTokens - 1) / blockSize);
    if (needed > numGpuBlocks) {
      throw new KvgateError(
        'KVG_ERR_INVALID_ARGUMENT',
        `request needs ${needed} KV blocks (${req.promptTokens.length} prompt + ${req.maxTokens} generated tokens)` +
          ` but the cache has ${numGpuBlocks}`,
        { requestId: req.id, needed, numGpuBlocks },
      );
    }
    const entry = new RequestEntry(req, now, blockSize);
    this.#requests.set(req.id, entry);
    enqueue(this.#waiting, entry, false, this.#policy);
    this.#stats.promptTokens += entry.promptLen;
  }

  /** Removes a queued or running request, or releases held blocks; false when unknown. */
  abort(id: string): boolean {
    if (this.#held.release(id)) return true;
    const r = this.#requests.get(id);
    if (r === undefined) return false;
    this.#requests.delete(id);
    const w = this.#waiting.indexOf(r);
    if (w >= 0) this.#waiting.splice(w, 1);
    const k = this.#running.indexOf(r);
    if (k >= 0) this.#running.splice(k, 1);
    this.#releaseBlocks(r.blocks);
    r.blocks = [];
    this.#collectEvictions();
    return true;
  }

  /**
   * True when no request is queued, running or transferring and no event is pending (held leases do not count).
   * Drivers step while this is false; a step that schedules nothing means everything waits on `nextWakeTime()` or
   * on new input (so a step never ends empty for a preemption alone: see step 1 above).
   */
  isIdle(): boolean {
    return this.#waiting.length === 0 && this.#running.length === 0 && this.#pendingEvents.length === 0;
  }

  /** The earliest time something changes without new input (a transfer ends, a lease expires); else undefined. */
  nextWakeTime(): number | undefined {
    let t = Infinity;
    for (const r of this.#running) if (r.state === 'transferring') t = Math.min(t, r.readyAt);
    t = Math.min(t, this.#held.nextExpiry());
    return t === Infinity ? undefined : t;
  }

  /**
   * Hands over the blocks a finished `holdBlocksMs` request kept (the NIXL read of a remote decode): checks the
   * lease and, when given, the block ids.
   */
  pullHeld(id: string, blockIds: readonly number[] | undefined, now: number): PullResult {
    return this.#held.pull(id, blockIds, now);
  }

  /** Frees the blocks of every lease that ended by `now` (step does this too; idle drivers call it). */
  releaseExpiredLeases(now: number): void {
    this.#held.releaseExpired(now);
  }

  /** Empties the prefix cache and emits AllBlocksCleared; false (nothing done) while requests hold blocks. */
  resetPrefixCache(): boolean {
    if (!this.#pool.reset()) return false;
    this.#hybrid?.reset();
    this.#pendingEvents.push({ type: 'cleared' });
    return true;
  }

  stats(): EngineCoreStats {
    let transferring = 0;
    for (const r of this.#running) if (r.state === 'transferring') transferring++;
    return {
      running: this.#running.length - transferring,
      waiting: this.#waiting.length,
      transferring,
      kvUsage: this.#pool.usage(),
      activeBlocks: this.#pool.activeBlocks,
      cachedBlocks: this.#pool.cachedBlocks,
      freeBlocks: this.#pool.freeBlocks,
      heldRequests: this.#held.size,
      ...this.#stats,
    };
  }

  /** Runs one scheduler iteration at `now`. See the module comment. */
  step(now: number): StepResult {
    const kvEvents: KvEvent[] = this.#pendingEvents;
    this.#pendingEvents = [];
    const result: StepResult = {
      startedAt: now,
      durationMs: 0,
      extrapolated: false,
      scheduledTokens: 0,
      prefillTokens: 0,
      decodeSequences: 0,
      outputs: [],
      admitted: [],
      finished: [],
      preempted: [],
      kvEvents,
    };
    this.releaseExpiredLeases(now);
    this.#completeTransfers(now, kvEvents);
    const scheduled: Scheduled[] = [];
    for (let before = -1; scheduled.length === 0 && result.preempted.length > before;) {
      before = result.preempted.length; // each pass that preempts shortens `running`
      const budget = this.#scheduleRunning(scheduled, result);
      if (result.preempted.length === before) this.#admitWaiting(now, budget, scheduled, result);
    }
    kvEvents.push(...this.#collectEvictions());
    if (scheduled.length === 0) return result;
    this.#timeStep(scheduled, result);
    this.#applyEffects(scheduled, result);
    kvEvents.push(...this.#collectEvictions());
    return result;
  }

  /** Transfers that completed: the prompt (but its last token) is now computed. */
  #completeTransfers(now: number, kvEvents: KvEvent[]): void {
    for (const r of this.#running) {
      if (r.state === 'transferring' && r.readyAt <= now) {
        r.state = 'running';
        r.transferDone = true;
        r.numComputed = r.promptLen - 1;
        this.#commitFullBlocks(r, kvEvents);
      }
    }
  }

  /** Step 1: running requests in order, preempting the newest when the cache is full. Returns the budget left. */
  #scheduleRunning(scheduled: Scheduled[], result: StepResult): number {
    const blockSize = this.options.blockSize;
    let budget = this.options.maxNumBatchedTokens;
    for (let i = 0; i < this.#running.length && budget > 0;) {
      const r = this.#running[i]!;
      if (r.state === 'transferring') {
        i++;
        continue;
      }
      const n = Math.min(r.tokens.length - r.numComputed, budget);
      const need = Math.ceil((r.numComputed + n) / blockSize) - r.blocks.length;
      let selfPreempted = false;
      while (need > this.#pool.available()) {
        const v = victimIndex(this.#running, this.#policy);
        const victim = this.#running[v]!;
        this.#preempt(victim, result);
        if (victim === r) {
          selfPreempted = true;
          break;
        }
        // A victim ahead of `r` (the priority policy's) was scheduled in this step: unscheduled, as vLLM does.
        if (v < i) {
          const k = scheduled.findLastIndex((x) => x.r === victim);
          if (k >= 0) budget += scheduled.splice(k, 1)[0]!.n;
          i--;
        }
      }
      if (selfPreempted) break;
      for (let k = 0; k < need; k++) r.blocks.push(this.#pool.allocate(r.priority)!);
      scheduled.push({ r, n });
      budget -= n;
      i++;
    }
    return budget;
  }

  /** Step 2: waiting requests in queue order while seats, budget and cache allow. Returns the budget left. */
  #admitWaiting(now: number, budget: number, scheduled: Scheduled[], result: StepResult): number {
    const { blockSize, maxNumSeqs } = this.options;
    while (this.#waiting.length > 0 && budget > 0 && this.#running.length < maxNumSeqs) {
      const r = this.#waiting[0]!;
      const total = r.tokens.length;
      const maxHitBlocks = Math.floor((total - 1) / blockSize);
      const fullHit = this.#pool.matchPrefix(r.seqHashes, maxHitBlocks);
      // A hybrid engine reuses only the prefix every KV-cache group serves.
      const hitBlocks = this.#hybrid === undefined ? fullHit : this.#hybrid.hitBlocks(r.seqHashes, fullHit);
      const hitTokens = hitBlocks * blockSize;
      const remote = r.remotePrefill && !r.transferDone;
      // A remote prefill allocates the whole prompt now; a local one the first chunk.
      const n = remote ? 0 : Math.min(total - hitTokens, budget);
      const blocksNeeded = remote ? Math.ceil(r.promptLen / blockSize) : Math.ceil((hitTokens + n) / blockSize);
      const newBlocks = blocksNeeded - hitBlocks;
      if (newBlocks > this.#pool.available() - this.#pool.inactiveAmong(r.seqHashes, hitBlocks)) break;
      this.#waiting.shift();
      for (let k = 0; k < hitBlocks; k++) r.blocks.push(this.#pool.acquireCached(r.seqHashes[k]!, r.priority));
      for (let k = 0; k < newBlocks; k++) r.blocks.push(this.#pool.allocate(r.priority)!);
      r.numComputed = hitTokens;
      r.committed = hitBlocks;
      this.#stats.prefixQueriedTokens += total;
      this.#stats.prefixHitTokens += hitTokens;
      if (r.cachedTokens < 0) {
        r.cachedTokens = hitTokens;
        result.admitted.push({ requestId: r.id, cachedTokens: hitTokens, queuedMs: now - r.addedAt });
      }
      this.#running.push(r);
      if (remote) {
        r.state = 'transferring';
        r.readyAt = now + this.transferMs(r.promptLen - hitTokens);
        continue;
      }
      r.state = 'running';
      scheduled.push({ r, n });
      budget -= n;
    }
    return budget;
  }

  /** Step 3a: the step's duration from the timing model over what was scheduled. */
  #timeStep(scheduled: readonly Scheduled[], result: StepResult): void {
    const prefill: PrefillWork[] = [];
    let decodeCount = 0;
    let decodeContext = 0;
    for (const { r, n } of scheduled) {
      result.scheduledTokens += n;
      if (n === 1 && r.outputs > 0 && r.numComputed === r.tokens.length - 1) {
        decodeCount++;
        decodeContext += r.numComputed + 1;
      } else {
        prefill.push({ cachedTokens: r.numComputed, newTokens: n });
        result.prefillTokens += n;
      }
    }
    result.decodeSequences = decodeCount;
    const timing = this.options.timing.stepMs({
      prefill,
      decodeCount,
      decodeContextTokens: decodeContext,
      kvUsage: this.#pool.usage(),
    });
    result.durationMs = timing.ms / this.options.speedup;
    result.extrapolated = timing.extrapolated;
    this.#stats.steps++;
    this.#stats.busyMs += result.durationMs;
    if (timing.extrapolated) this.#stats.extrapolatedSteps++;
  }

  /** Step 3b: computed tokens, newly full blocks, one sampled token per request at the end of its known tokens, finishes. */
  #applyEffects(scheduled: readonly Scheduled[], result: StepResult): void {
    for (const { r, n } of scheduled) {
      r.numComputed += n;
      this.#commitFullBlocks(r, result.kvEvents);
      if (r.numComputed < r.tokens.length) continue; // mid-prefill chunk
      const vocab = this.options.sampleTokenIds;
      const tokenId = vocab[r.sampler.next(vocab.length)]!;
      r.tokens.push(tokenId);
      r.sampler.append(tokenId);
      result.outputs.push({ requestId: r.id, tokenId, index: r.outputs });
      r.outputs++;
      this.#stats.generationTokens++;
      if (r.outputs >= r.maxTokens) this.#finish(r, result);
    }
  }

  #collectEvictions(): KvEvent[] {
    const pool = this.#pool.drainEvicted().map((h) => ({ type: 'removed' as const, blockHashes: [h] }));
    return this.#hybrid === undefined ? pool : [...pool, ...this.#hybrid.drainEvicted()];
  }

  /** Caches every block of `r` that is now fully computed (see block-commit.ts). */
  #commitFullBlocks(r: RequestEntry, events: KvEvent[]): void {
    const from = r.committed;
    commitFullBlocks(r, this.#pool, this.options, events);
    if (this.#hybrid === undefined || r.committed === from) return;
    const at = { from, to: r.committed, computedTokens: r.numComputed, loraName: r.loraName ?? null };
    const commit = { ...at, cacheSalt: r.cacheSalt ?? null };
    events.push(...this.#hybrid.commit(r.seqHashes, (k) => this.engineHash(r.seqHashes[k]!), r.tokens, commit));
  }

  #releaseBlocks(blocks: Block[]): void {
    // Tail first, so a request's last blocks are evicted before its prefix.
    for (let i = blocks.length - 1; i >= 0; i--) this.#pool.release(blocks[i]!);
  }

  #preempt(r: RequestEntry, result: StepResult): void {
    const k = this.#running.indexOf(r);
    this.#running.splice(k, 1);
    this.#releaseBlocks(r.blocks);
    r.blocks = [];
    r.numComputed = 0;
    r.committed = 0;
    r.state = 'waiting';
    enqueue(this.#waiting, r, true, this.#policy);
    this.#stats.preemptions++;
    result.preempted.push(r.id);
  }

  #finish(r: RequestEntry, result: StepResult): void {
    this.#running.splice(this.#running.indexOf(r), 1);
    this.#requests.delete(r.id);
    let heldBlockIds: number[] | undefined;
    if (r.holdBlocksMs !== undefined && r.holdBlocksMs > 0) {
      heldBlockIds = r.blocks.map((b) => b.id);
      this.#held.hold(r.id, { blocks: r.blocks, expiresAt: result.startedAt + r.holdBlocksMs, numTokens: r.promptLen });
    } else {
      this.#releaseBlocks(r.blocks);
    }
    r.blocks = [];
    result.finished.push({
      requestId: r.id,
      reason: 'length',
      promptTokens: r.promptLen,
      outputTokens: r.outputs,
      cachedTokens: Math.max(0, r.cachedTokens),
      heldBlockIds,
    });
  }
}
