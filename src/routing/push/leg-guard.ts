/**
 * The guard of one dispatched leg, in three parts split by what each owns
 * (the shape of Dynamo's request guard). The push router builds one per leg
 * and hands it everything it needs; the guard never reaches back into the
 * router.
 */
import { BatchedFlow, type Batched, type Clock } from '../../common/index.js';
import { outputBlockDecay } from '../../core/index.js';
import {
  eventInfo,
  isUsageOnlyChunk,
  type ChunkInfo,
  type EngineEvent,
  EngineStreamError,
  type EngineEventStream,
  malformedEventError,
  unfinishedStreamError,
} from '../../engines/index.js';
import type { KvgateError } from '../../errors/index.js';
import type { KvRouter } from '../kv-router.js';
import { isAgentPath } from './continuation.js';
import type { PoolMetrics } from './pool-metrics.js';
import type { LegRequest, Selection } from './types.js';

/** Owns the leg's booking: returned exactly once, on end, upstream error, disconnect or dispatch failure. */
class RequestCleanup {
  readonly #release: () => void;
  #done = false;

  constructor(release: () => void) {
    this.#release = release;
  }

  /** False when the leg was already released. */
  finish(): boolean {
    if (this.#done) return false;
    this.#done = true;
    this.#release();
    return true;
  }
}

/** Owns the scheduler's view of the leg's progress: prompt done at the first output, then one block per `blockSize` tokens. */
class OutputBlockTracker {
  readonly #kv: KvRouter;
  readonly #req: LegRequest;
  readonly #blockSize: number;
  readonly #trackBlocks: boolean;
  #started = false;
  #osl = 0;
  #blocks: number;

  constructor(kv: KvRouter, req: LegRequest, blockSize: number) {
    this.#kv = kv;
    this.#req = req;
    this.#blockSize = blockSize;
    this.#trackBlocks = kv.config.routerTrackOutputBlocks;
    this.#blocks = Math.ceil(req.isl / blockSize);
  }

  onOutput(produced: number): void {
    if (!this.#started) {
      this.#started = true;
      this.#kv.markPrefillCompleted(this.#req.requestId);
    }
    this.#osl += produced;
    if (!this.#trackBlocks) return;
    const blocks = Math.ceil((this.#req.isl + this.#osl) / this.#blockSize);
    const decay = outputBlockDecay(this.#osl, this.#req.routing.expectedOutputTokens);
    while (this.#blocks < blocks) {
      this.#blocks++;
      this.#kv.addOutputBlock(this.#req.requestId, decay);
    }
  }
}

/** Owns what the leg reports: the tracker's timestamps, TTFT, OSL, ITL, and the engine's cached tokens against the prediction. */
class RequestObservability {
  readonly #clock: Clock;
  readonly #lm: ReturnType<PoolMetrics['leg']> | undefined;
  readonly #lat: ReturnType<PoolMetrics['latency']> | undefined;
  readonly #req: LegRequest;
  readonly #sel: Selection;
  readonly #blockSize: number;
  #firstAt: number | undefined;
  #osl = 0;
  #usageOsl: number | undefined;
  /**
   * With output-block tracking on, ITL is observed at each output block the sequence grows by (Dynamo's guard
   * updates it there): the blocks counted so far, or -1 when ITL is observed once, at the end.
   */
  #itlBlocks: number;
  #itlObserved = false;
  /** Only KV mode predicts cached tokens; the others have nothing to compare. */
  #compared: boolean;

  constructor(
    clock: Clock,
    pm: PoolMetrics | undefined,
    req: LegRequest,
    sel: Selection,
    blockSize: number,
    predicts: boolean,
    itlPerBlock: boolean,
  ) {
    this.#clock = clock;
    this.#itlBlocks = itlPerBlock ? Math.ceil(req.isl / blockSize) : -1;
    this.#lm = pm?.leg(req.phase);
    this.#lat = pm?.latency(req.phase, sel.worker.id);
    this.#req = req;
    this.#sel = sel;
    this.#blockSize = blockSize;
    this.#compared = !predicts;
  }

  onOutput(produced: number, info: ChunkInfo): void {
    if (produced > 0) {
      if (this.#firstAt === undefined) {
        this.#firstAt = this.#clock.now();
        this.#req.tracker?.recordFirstToken();
        this.#lat?.ttft.observe((this.#firstAt - this.#req.receivedAt) / 1000);
      }
      this.#osl += produced;
      if (this.#itlBlocks >= 0) this.#itlPerBlock();
    }
    if (info.usage !== undefined) {
      if (info.usage.completionTokens !== undefined) this.#usageOsl = info.usage.completionTokens;
      if (info.usage.cachedTokens !== undefined) this.#comparePrediction(info.usage.cachedTokens);
    }
  }

  /** Observes the ITL so far when the output grew the sequence by a block (tracking on). */
  #itlPerBlock(): void {
    const blocks = Math.ceil((this.#req.isl + this.#osl) / this.#blockSize);
    if (blocks <= this.#itlBlocks) return;
    this.#itlBlocks = blocks;
    if (this.#osl < 2) return;
    this.#itlObserved = true;
    this.#lat?.itl.observe((this.#clock.now() - this.#firstAt!) / (this.#osl - 1) / 1000);
  }

  /** The engine's own count of prefix-cache hits against what the router predicted. */
  #comparePrediction(cachedTokens: number): void {
    if (this.#compared) return;
    this.#compared = true;
    const m = this.#lm;
    if (m === undefined) return;
    // An engine always computes at least the prompt's last token, so a fully
    // cached block-aligned prompt reports one block less (vLLM's rule).
    const usableBlocks = Math.min(
      this.#sel.overlapBlocks,
      Math.floor(Math.max(0, this.#req.isl - 1) / this.#blockSize),
    );
    const error = cachedTokens - usableBlocks * this.#blockSize;
    m.predictionError.observe(error);
    (error === 0 ? m.exact : error < 0 ? m.over : m.under).inc();
  }

  finish(dispatched: boolean): void {
    this.#req.tracker?.recordFinish();
    const m = this.#lm;
    if (!dispatched || m === undefined) return;
    const osl = this.#usageOsl ?? this.#osl;
    if (osl > 0) m.osl.observe(osl);
    // Per block when tracking is on; a leg that grew no block past its first token is observed once here.
    if (this.#firstAt !== undefined && osl >= 2 && !this.#itlObserved)
      this.#lat?.itl.observe((this.#clock.now() - this.#firstAt) / (osl - 1) / 1000);
  }
}

export interface LegGuardOptions {
  readonly clock: Clock;
  readonly metrics: PoolMetrics | undefined;
  /** KV mode: the scheduler whose bookkeeping follows the leg's progress. */
  readonly kvRouter: KvRouter | undefined;
  readonly blockSize: number;
  /** Returns the leg's booking; called exactly once. */
  readonly release: () => void;
  /** The leg failed (a dispatch failure, or mid-stream); the error is rethrown to the consumer. */
  readonly onError?: ((err: unknown) => void) | undefined;
  /** The engine reported how many of the prompt's tokens it found cached (its usage): the leg's span names it. */
  readonly onCachedTokens?: ((tokens: number) => void) | undefined;
  /**
   * A streamed leg's outcome, told once when its stream ends: undefined for a clean end, else its failure. Its head
   * says little (an engine whose loop hangs sends it, then nothing). A consumer that stops reading tells nothing.
   */
  readonly onStreamOutcome?: ((err: unknown) => void) | undefined;
}

/** Watches one dispatched leg: progress into the bookkeeping, reports into metrics, exactly one release. */
export class LegGuard {
  readonly #cleanup: RequestCleanup;
  readonly #blocks: OutputBlockTracker | undefined;
  readonly #observe: RequestObservability;
  readonly #onError: ((err: unknown) => void) | undefined;
  readonly #onCached: ((tokens: number) => void) | undefined;
  readonly #onOutcome: ((err: unknown) => void) | undefined;
  #failed = false;
  /** The worker the leg went to. */
  readonly worker: { readonly id: number; readonly url: string };
  /** An agent API's leg (Messages, Responses): its stream must end with its answer's final event. */
  readonly agentPath: string | undefined;
  /** The engine path the leg was sent to (what a broken answer's error names). */
  readonly path: string;

  constructor(deps: LegGuardOptions, req: LegRequest, sel: Selection) {
    this.#onError = deps.onError;
    this.#onCached = deps.onCachedTokens;
    this.#onOutcome = deps.onStreamOutcome;
    this.worker = sel.worker;
    this.agentPath = isAgentPath(req.path) ? req.path : undefined;
    this.path = req.path;
    this.#cleanup = new RequestCleanup(deps.release);
    this.#blocks = deps.kvRouter === undefined ? undefined : new OutputBlockTracker(deps.kvRouter, req, deps.blockSize);
    this.#observe = new RequestObservability(
      deps.clock,
      deps.metrics,
      req,
      sel,
      deps.blockSize,
      deps.kvRouter !== undefined,
      deps.kvRouter?.config.routerTrackOutputBlocks === true,
    );
  }

  onOutput(info: ChunkInfo): void {
    const produced = info.tokenIds ?? info.outputChoices;
    if (produced > 0) this.#blocks?.onOutput(produced);
    this.#observe.onOutput(produced, info);
    const cached = info.usage?.cachedTokens;
    if (cached !== undefined) this.#onCached?.(cached);
  }

  /** The leg failed (reported once, before the leg ends: an assembled answer's stream fails inside the dispatch). */
  failed(err: unknown): void {
    if (this.#failed) return;
    this.#failed = true;
    this.#onError?.(err);
  }

  /** A streamed leg ended cleanly (`err` undefined) or failed: its outcome, told once by `guardedEvents`. */
  streamOutcome(err: unknown): void {
    this.#onOutcome?.(err);
  }

  /** Ends the leg once (later calls do nothing). */
  finish(dispatched: boolean): void {
    // The booking goes back first: load must return to zero even if an observer throws.
    if (!this.#cleanup.finish()) return;
    this.#observe.finish(dispatched);
  }
}

/**
 * Passes the engine's events through untouched while the guard watches them; releases on every exit.
 * `dropUsageChunk`: the usage-only chunk kvgate asked for on the client's behalf is watched, not passed on.
 * Read in batches (common's `Batched`), the guard watches a whole upstream read at once.
 */
export function guardedEvents(
  stream: EngineEventStream,
  guard: LegGuard,
  dropUsageChunk = false,
): Batched<EngineEvent> {
  return new BatchedFlow(() => guardedBatches(stream, guard, dropUsageChunk));
}

async function* guardedBatches(
  stream: EngineEventStream,
  guard: LegGuard,
  dropUsageChunk: boolean,
): AsyncGenerator<EngineEvent[]> {
  let completed = false;
  try {
    const it = stream.batches();
    // One record for the stream's life, refilled per read (no allocation per read).
    const seen: Watched = { batch: [], error: undefined };
    const agent = guard.agentPath !== undefined;
    let last: string | undefined;
    try {
      for (;;) {
        const next = await it.next();
        if (next.done === true) break;
        seen.batch = next.value;
        watched(seen, guard, dropUsageChunk);
        // Read before the batch is handed on (its reader owns it): one look per upstream read.
        if (agent) last = lastAgentEvent(seen.batch) ?? last;
        if (seen.batch.length > 0) yield seen.batch;
        // The events before an engine's error event go out first; the leg fails there.
        if (seen.error !== undefined) throw seen.error;
      }
      if (agent && (last === undefined || !AGENT_FINAL_EVENTS.has(last)))
        throw unfinishedStreamError(guard.worker.url, guard.agentPath!, last);
    } catch (err) {
      guard.failed(err);
      guard.streamOutcome(err);
      throw err;
    }
    completed = true;
    guard.streamOutcome(undefined);
  } finally {
    guard.finish(true);
    if (!completed) stream.cancel();
  }
}

/**
 * The events that end an agent API's answer: Anthropic's `message_stop`, a Responses answer's `response.completed`
 * or `response.incomplete` (cut by its token limit, which is an answer). An error event fails the leg before.
 */
const AGENT_FINAL_EVENTS: ReadonlySet<string> = new Set(['message_stop', 'response.completed', 'response.incomplete']);

/** The type of a batch's last event other than `[DONE]` (vLLM ends some agent streams with one): its SSE name, or its JSON's `type`. */
function lastAgentEvent(batch: readonly EngineEvent[]): string | undefined {
  for (let i = batch.length - 1; i >= 0; i--) {
    const ev = batch[i]!;
    if (ev.done) continue;
    const type = (ev.json as { type?: unknown } | undefined)?.type;
    return ev.event ?? (typeof type === 'string' ? type : '');
  }
  return undefined;
}

/** One upstream read as the guard passes it on, and the engine's error event (or broken event) that ended it, if one did. */
interface Watched {
  batch: EngineEvent[];
  error: KvgateError | undefined;
}

/**
 * Tells the guard about each event of `w.batch`, which becomes the events to pass on: without a dropped usage
 * chunk, and cut before an engine's error event or an event that is not JSON, which becomes `w.error` (the leg fails
 * there, and the client gets kvgate's error in place of the engine's event).
 */
function watched(w: Watched, guard: LegGuard, dropUsageChunk: boolean): void {
  const batch = w.batch;
  let out = batch;
  for (let i = 0; i < batch.length; i++) {
    const ev = batch[i]!;
    const info = eventInfo(ev);
    if (info !== undefined) {
      if (info.error !== undefined && info.error !== null) {
        w.error = new EngineStreamError(info.error, guard.worker);
        if (out === batch) out = batch.slice(0, i);
        break;
      }
      guard.onOutput(info);
      // Only a chunk with usage can be the usage-only chunk: the others are not parsed for it.
      if (dropUsageChunk && info.usage !== undefined && isUsageOnlyChunk(ev.json)) {
        if (out === batch) out = batch.slice(0, i);
        continue;
      }
    } else if (!ev.done) {
      // Data that is not JSON: no client can read it, so the leg fails there (after the events before it).
      w.error = malformedEventError(guard.worker.url, guard.path, ev.data);
      if (out === batch) out = batch.slice(0, i);
      break;
    }
    // Every other event after a dropped one is passed on, `[DONE]` (which carries no chunk) included.
    if (out !== batch) out.push(ev);
  }
  w.batch = out;
}
