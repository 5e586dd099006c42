/**
 * One disaggregated request: prefill on the prefill pool, then decode on the
 * decode pool (spec 5.2), with the failure and cancellation rules of 5.4 and
 * 5.6. Built and run by the PrefillRouter; one instance per request.
 *
 *   setPhase(prefill) -> choose + book the prefill worker (sticky, pinned or best)
 *     bootstrap (SGLang): dispatch prefill in the background; once the engine
 *       has it, release the phase permit and dispatch decode with the same
 *       triple. Never waits for prefill output: SGLang's prefill completes only
 *       after decode has connected.
 *     sync (vLLM): prefill to completion (one token, stream off), read its
 *       kv_transfer_params, then decode with them verbatim.
 *   setPhase(decode) -> decode routed with the no-overlap override
 *
 * Cancellation contract:
 * - the client going away before the prefill reached an engine cancels it
 *   (nothing is transferring); after that the prefill always runs to its end,
 *   and decode is still dispatched so the KV is consumed and released on the
 *   prefill side (cut to one token when the client left before it was sent);
 *   the decode leg is cancelled once its first output confirms the KV arrived. `run()` still rejects at once with KVG_ERR_CLIENT_ABORTED.
 * - bootstrap path: if one leg fails the other is cancelled rather than left
 *   waiting for its rendezvous timeout (a decode that already produced output
 *   has its KV and is left to finish).
 * - a failed prefill fails the request; nothing is retried aggregated. A
 *   prefill worker that could not be reached (nothing sent) is reported in
 *   `unreachableWorker` so the PrefillRouter can run the request again.
 * Every path releases the bookkeeping of both legs: each leg's PushRouter
 * guard frees its booking when the leg ends, however it ends.
 */
import { RequestTracker, type Clock, type Rng } from '../core/index.js';
import {
  EMPTY_LEG, mergeLegs, oneTokenPrefillFields, readChunkInfo, readVllmPrefillResult, sglangDecodeLeg, sglangPrefillLeg, vllmDecodeLeg, vllmPrefillLeg,
  type EngineEvent, type EngineLeg,
} from '../engines/index.js';
import { KvgateError, isKvgateError } from '../errors/index.js';
import type { EventLog } from '../events/index.js';
import type { KvgateMetrics } from '../metrics/index.js';
import {
  bootstrapFor, decodeRouterOverride, handoffPath, prefillWorkerInfo, withPromptTokensDetails, type HandoffPath,
} from './disagg-handoff.js';
import type { PrefillSessions } from './disagg-sessions.js';
import type { LegRequest, LegResponse, PushRouter, Selection } from './push-router.js';

/** `x-session-id` / `nvext.session_control`, as the frontend parsed it. */
export interface SessionHint {
  readonly id: string;
  readonly action?: 'open' | 'close' | undefined;
  readonly timeoutSecs?: number | undefined;
}

/** An SSE event handed to the client: the engine's own bytes, or re-serialised data when kvgate patched it. */
export interface DisaggSseEvent {
  readonly raw?: Uint8Array | undefined;
  readonly data: string;
}

export type DisaggBody =
  | { readonly kind: 'sse'; readonly events: AsyncIterable<DisaggSseEvent> }
  | { readonly kind: 'json'; readonly bytes: Uint8Array };

export interface DisaggRef {
  readonly workerId: number;
  readonly dpRank: number;
}

export interface DisaggOutcome {
  /** The worker whose answer this is: the decode worker, or the prefill worker when it refused the request (4xx). */
  readonly worker: DisaggRef;
  /** The prefill worker, in the spec's attribution order. */
  readonly prefillWorker: DisaggRef;
  readonly handoff: HandoffPath;
  readonly status: number;
  readonly body: DisaggBody;
  readonly tracker: RequestTracker;
}

/** Picks and books (or peeks) the prefill worker: sticky session, then pinned id, then the router's best. */
export type PrefillResolver = (leg: LegRequest, session: SessionHint | undefined, mode: 'book' | 'query') => Promise<Selection>;

export interface DisaggDeps {
  readonly model: string;
  readonly pool: PushRouter;
  readonly decode: PushRouter;
  readonly resolve: PrefillResolver;
  readonly sessions: PrefillSessions;
  readonly clock: Clock;
  readonly rng: Rng;
  readonly metrics: KvgateMetrics | undefined;
  readonly log: EventLog | undefined;
}

interface Deferred {
  readonly promise: Promise<void>;
  resolve(): void;
  reject(err: unknown): void;
}

function deferred(): Deferred {
  let resolve!: () => void;
  let reject!: (err: unknown) => void;
  const promise = new Promise<void>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  promise.catch(() => undefined);
  return { promise, resolve, reject };
}

/** Failures of the request itself keep their code; engine and transport failures of the prefill leg become KVG_ERR_PREFILL_FAILED. */
const KEEP_CODES = new Set([
  'KVG_ERR_CLIENT_ABORTED', 'KVG_ERR_BACKPRESSURE', 'KVG_ERR_OVERLOADED', 'KVG_ERR_NO_WORKERS', 'KVG_ERR_UNKNOWN_WORKER',
  'KVG_ERR_INVALID_DP_RANK', 'KVG_ERR_MISSING_WORKER_ID', 'KVG_ERR_NO_DISAGGREGATED_PARAMS', 'KVG_ERR_INVALID_ARGUMENT',
  'KVG_ERR_DUPLICATE_REQUEST', 'KVG_ERR_PREFILL_FAILED',
]);

function prefillFailure(err: unknown, target: Selection | undefined): KvgateError {
  if (isKvgateError(err) && KEEP_CODES.has(err.code)) return err;
  const where = target === undefined ? '' : ` on worker ${target.worker.id} (dp rank ${target.dpRank})`;
  const why = err instanceof Error ? err.message : String(err);
  return new KvgateError('KVG_ERR_PREFILL_FAILED', `prefill${where} failed: ${why}`, {
    workerId: target?.worker.id, dpRank: target?.dpRank, cause: isKvgateError(err) ? err.code : undefined,
  }, { cause: err });
}

function jsonOf(bytes: Uint8Array): unknown {
  try {
    return JSON.parse(Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('utf8'));
  } catch {
    return undefined;
  }
}

export class DisaggRequest {
  readonly #deps: DisaggDeps;
  readonly #leg: LegRequest;
  readonly #session: SessionHint | undefined;
  readonly tracker: RequestTracker;
  /** Cancels the prefill leg (only before it reached an engine, or when its decode partner failed). */
  readonly #prefillCtl = new AbortController();
  /** Cancels the decode leg (client gone after KV receipt, or its prefill partner failed first). */
  readonly #decodeCtl = new AbortController();
  #target: Selection | undefined;
  #path: HandoffPath | undefined;
  #prefillDispatched = false;
  #prefillError: KvgateError | undefined;
  /** The prefill's answer (for attribution from its payload). */
  #prefillPayload: unknown;
  #decodeOutput = false;
  #clientGone = false;
  #ended = false;
  #onClientAbort: (() => void) | undefined;
  #unreachable: number | undefined;
  /** Settles when the prefill leg has ended (its bookkeeping released); never rejects. */
  prefillEnded: Promise<void> = Promise.resolve();

  constructor(deps: DisaggDeps, leg: LegRequest, session: SessionHint | undefined) {
    this.#deps = deps;
    this.#leg = leg;
    this.#session = session;
    this.tracker = leg.tracker ?? new RequestTracker(deps.clock);
  }

  /**
   * The prefill worker that could not be reached when the request failed that
   * way: nothing was sent to any engine, so the whole request may run again
   * elsewhere.
   */
  get unreachableWorker(): number | undefined {
    return this.#unreachable;
  }

  /** Runs the request; resolves with the decode leg's answer once it has started. */
  run(): Promise<DisaggOutcome> {
    const signal = this.#leg.signal;
    return new Promise<DisaggOutcome>((resolve, reject) => {
      let settled = false;
      this.#onClientAbort = () => {
        this.#clientGone = true;
        // Before an engine has the prefill, nothing is transferring: cancel it. After, it runs to its end.
        if (!this.#prefillDispatched) this.#prefillCtl.abort(signal.reason);
        else if (this.#decodeOutput) this.#decodeCtl.abort(signal.reason);
        if (!settled) {
          settled = true;
          reject(new KvgateError('KVG_ERR_CLIENT_ABORTED', 'the client went away during the disaggregated request', undefined, { cause: signal.reason }));
        }
      };
      signal.addEventListener('abort', this.#onClientAbort, { once: true });
      if (signal.aborted) this.#onClientAbort();
      this.#flow().then(
        (out) => {
          if (!settled) {
            settled = true;
            resolve(out);
          } else {
            void this.#abandon(out);
          }
        },
        (err: unknown) => {
          this.#end();
          if (!settled) {
            settled = true;
            reject(err);
          } else if (!isKvgateError(err, 'KVG_ERR_CLIENT_ABORTED')) {
            this.#deps.log?.warn({ model: this.#deps.model, requestId: this.#leg.requestId, err: String(err) }, 'disaggregated request failed after the client left');
          }
        },
      );
    });
  }

  async #flow(): Promise<DisaggOutcome> {
    const base = this.#leg;
    const tracker = this.tracker;
    const permit = await tracker.setPhase('prefill');
    if (this.#prefillCtl.signal.aborted) {
      permit.release();
      throw new KvgateError('KVG_ERR_CLIENT_ABORTED', 'the client went away before the prefill was routed');
    }
    const prefillBase: LegRequest = { ...base, phase: 'prefill', stream: false, signal: this.#prefillCtl.signal, tracker, onDispatched: undefined };
    let target: Selection;
    try {
      target = await this.#deps.resolve(prefillBase, this.#session, 'book');
    } catch (err) {
      permit.release();
      throw prefillFailure(err, undefined);
    }
    // From here the prefill slot is booked; `dispatch` owns it (its guard releases it on every path).
    // Nothing between here and `dispatch` may throw: bootstrap endpoints were validated when the worker joined.
    this.#target = target;
    const w = target.worker;
    const path = handoffPath(w);
    this.#path = path;
    const bootstrap = path === 'bootstrap' ? bootstrapFor(w, target.dpRank, this.#deps.rng) : undefined;
    const admitted = deferred();
    const prefillLeg: LegRequest = {
      ...prefillBase,
      hints: { ...base.hints, prefillWorkerId: w.id, prefillDpRank: target.dpRank },
      leg: bootstrap !== undefined ? sglangPrefillLeg(base.body, { bootstrap }) : vllmPrefillLeg(base.body, { requestId: base.requestId }),
      onDispatched: () => {
        this.#prefillDispatched = true;
        this.#bindSession(target);
        // The prefill worker is recorded in the prefill slot (at routing); decode may now take the phase.
        permit.release();
        admitted.resolve();
      },
    };
    // This leg is never re-sent to another worker (the triple names this one, and attribution is write-once);
    // the PrefillRouter re-runs the whole request instead when the worker could not be reached.
    const prefill = this.#deps.pool.dispatch(prefillLeg, { ...target, pinned: true });

    if (bootstrap !== undefined) {
      this.prefillEnded = prefill.then(
        (res) => this.#bootstrapPrefillDone(res),
        (err: unknown) => this.#prefillFailed(err),
      ).finally(() => {
        permit.release();
        admitted.reject(this.#prefillError);
      });
      await admitted.promise.catch(() => {
        throw this.#prefillError ?? prefillFailure(new Error('the prefill leg ended before it was dispatched'), target);
      });
      // The room already encodes the prefill rank; newer SGLang decode builds also read it directly
      // (`disagg_prefill_dp_rank`), which matters when prefill and decode DP sizes differ.
      const prefillDpRank = w.dpSize > 1 ? { prefillDpRank: target.dpRank - w.dpStart } : {};
      return this.#decode(sglangDecodeLeg({ bootstrap, ...prefillDpRank }), undefined);
    }

    this.prefillEnded = prefill.then(() => undefined, () => undefined);
    let res: LegResponse;
    try {
      res = await prefill;
    } catch (err) {
      this.#prefillFailed(err);
      throw this.#prefillError!;
    } finally {
      permit.release();
    }
    this.#prefillPayload = res.body.kind === 'json' ? res.body.json : undefined;
    if (res.status >= 400) {
      // The engine refused the request itself (a client error): the client gets the engine's answer.
      this.#noteOutcome('prefill_failed');
      const ref = { workerId: w.id, dpRank: target.dpRank };
      const bytes = res.body.kind === 'json' ? res.body.bytes : new Uint8Array();
      this.#end();
      return { worker: ref, prefillWorker: this.#prefillRef(), handoff: path, status: res.status, body: { kind: 'json', bytes }, tracker };
    }
    let ticket: ReturnType<typeof readVllmPrefillResult>;
    try {
      ticket = readVllmPrefillResult(this.#prefillPayload, { worker: `${w.id} (${w.url})` });
    } catch (err) {
      this.#prefillFailed(err);
      throw this.#prefillError!;
    }
    tracker.recordPrefillComplete();
    return this.#decode(vllmDecodeLeg({ requestId: base.requestId, kvTransferParams: ticket.kvTransferParams }), ticket.promptTokensDetails);
  }

  /** The decode leg, after the prefill handed over (sync) or was accepted (bootstrap). */
  async #decode(handoff: EngineLeg, promptTokensDetails: Record<string, unknown> | undefined): Promise<DisaggOutcome> {
    const base = this.#leg;
    const target = this.#target!;
    const permit = await this.tracker.setPhase('decode');
    if (this.#prefillError !== undefined) {
      permit.release();
      throw this.#prefillError;
    }
    // The client already left: decode only has to take the KV off the prefill engine, one token does that.
    const gone = this.#clientGone;
    const leg: LegRequest = {
      ...base,
      phase: 'decode',
      stream: gone ? false : base.stream,
      hints: { ...base.hints, prefillWorkerId: target.worker.id, prefillDpRank: target.dpRank },
      routerConfigOverride: decodeRouterOverride(base.routerConfigOverride) as Readonly<Record<string, unknown>>,
      leg: mergeLegs(base.leg ?? EMPTY_LEG, handoff, gone ? { fields: oneTokenPrefillFields(base.body), headers: {} } : EMPTY_LEG),
      signal: this.#decodeCtl.signal,
      tracker: this.tracker,
      onDispatched: undefined,
    };
    let res: LegResponse;
    try {
      res = await this.#deps.decode.dispatch(leg);
    } catch (err) {
      // Cancelled because the prefill failed first: that failure is the one to report.
      const reported = this.#prefillError ?? err;
      if (this.#prefillError === undefined) {
        this.#noteOutcome('decode_failed');
        this.#cancelPrefillPartner(err);
      }
      throw reported;
    } finally {
      permit.release();
    }
    if (res.status >= 400) this.#cancelPrefillPartner(new KvgateError('KVG_ERR_ENGINE_REJECTED', `decode refused the request (${res.status})`));
    this.#noteOutcome(res.status >= 400 ? 'decode_failed' : 'decoded');
    const worker = { workerId: res.selection.worker.id, dpRank: res.selection.dpRank };
    const common = { worker, prefillWorker: this.#prefillRef(), handoff: this.#path!, status: res.status, tracker: this.tracker };
    if (res.body.kind === 'json') {
      this.#onDecodeOutput();
      let bytes: Uint8Array = res.body.bytes;
      if (promptTokensDetails !== undefined && res.status < 400) {
        const patched = withPromptTokensDetails(res.body.json, promptTokensDetails);
        if (patched !== undefined) bytes = Buffer.from(JSON.stringify(patched));
      }
      this.#end();
      return { ...common, body: { kind: 'json', bytes } };
    }
    return { ...common, body: { kind: 'sse', events: this.#decodeEvents(res.body.events, promptTokensDetails) } };
  }

  /** The decode stream as the client sees it: usage patched on the sync path, early exits deferred until the KV arrived. */
  async *#decodeEvents(events: AsyncIterable<EngineEvent>, details: Record<string, unknown> | undefined): AsyncGenerator<DisaggSseEvent> {
    const it = events[Symbol.asyncIterator]();
    let completed = false;
    try {
      for (;;) {
        let next: IteratorResult<EngineEvent>;
        try {
          next = await it.next();
        } catch (err) {
          throw this.#prefillError !== undefined && isKvgateError(err, 'KVG_ERR_CLIENT_ABORTED') ? this.#prefillError : err;
        }
        if (next.done === true) {
          completed = true;
          return;
        }
        const ev = next.value;
        if (!this.#decodeOutput && isOutput(ev)) this.#onDecodeOutput();
        if (details !== undefined && !ev.done && ev.json !== undefined) {
          const patched = withPromptTokensDetails(ev.json, details);
          if (patched !== undefined) {
            yield { data: JSON.stringify(patched) };
            continue;
          }
        }
        yield ev;
      }
    } finally {
      if (completed) {
        this.#end();
      } else if (this.#decodeOutput) {
        await it.return?.();
        this.#end();
      } else {
        void this.#drainUntilOutput(it);
      }
    }
  }

  /** The consumer left before the KV arrived: keep reading until it did (first output), then cancel. */
  async #drainUntilOutput(it: AsyncIterator<EngineEvent>): Promise<void> {
    try {
      for (;;) {
        const next = await it.next();
        if (next.done === true || isOutput(next.value)) break;
      }
    } catch {
      // The leg failed: its guard has released it.
    } finally {
      await it.return?.()?.catch(() => undefined);
      this.#end();
    }
  }

  /** `run()` already rejected (client gone): consume the decode answer just far enough to release both engines. */
  async #abandon(out: DisaggOutcome): Promise<void> {
    if (out.body.kind === 'json') return;
    const it = out.body.events[Symbol.asyncIterator]();
    try {
      for (;;) {
        const next = await it.next();
        if (next.done === true || this.#decodeOutput) break;
      }
    } catch {
      // Cancelled at first output, or failed: either way the guards released the bookkeeping.
    } finally {
      await it.return?.()?.catch(() => undefined);
    }
  }

  #onDecodeOutput(): void {
    this.#decodeOutput = true;
    if (this.#clientGone) this.#decodeCtl.abort(this.#leg.signal.reason);
  }

  #bootstrapPrefillDone(res: LegResponse): void {
    this.#prefillPayload = res.body.kind === 'json' ? res.body.json : undefined;
    if (res.status >= 400) {
      const upstream = res.body.kind === 'json' ? (res.body.json ?? jsonOf(res.body.bytes)) : undefined;
      this.#prefillFailed(new KvgateError('KVG_ERR_PREFILL_FAILED',
        `prefill on worker ${res.selection.worker.id} answered ${res.status}`, { workerId: res.selection.worker.id, upstreamStatus: res.status, upstreamError: upstream }));
      return;
    }
    this.tracker.recordPrefillComplete();
  }

  /** Records the prefill's failure once; in the bootstrap pair, cancels a decode that has not received its KV. */
  #prefillFailed(err: unknown): void {
    if (this.#prefillError !== undefined) return;
    const e = prefillFailure(err, this.#target);
    this.#prefillError = e;
    if (!this.#prefillDispatched && (isKvgateError(err, 'KVG_ERR_ENGINE_UNREACHABLE') || isKvgateError(err, 'KVG_ERR_ENGINE_NOT_REGISTERED'))) {
      this.#unreachable = this.#target?.worker.id;
    }
    const session = this.#session;
    if (session !== undefined && !isKvgateError(e, 'KVG_ERR_CLIENT_ABORTED')) this.#deps.sessions.unbind(session.id);
    if (this.#path === 'bootstrap' && !this.#decodeOutput) this.#decodeCtl.abort(e);
    if (!isKvgateError(err, 'KVG_ERR_CLIENT_ABORTED') || !this.#prefillCtl.signal.aborted) this.#noteOutcome('prefill_failed');
  }

  /** The decode half of an SGLang pair failed: its prefill would wait for a partner that never comes. */
  #cancelPrefillPartner(reason: unknown): void {
    if (this.#path === 'bootstrap') this.#prefillCtl.abort(reason);
  }

  #bindSession(target: Selection): void {
    const s = this.#session;
    if (s === undefined) return;
    const sessions = this.#deps.sessions;
    if (s.action === 'close') {
      sessions.unbind(s.id);
      return;
    }
    const b = sessions.lookup(s.id);
    if (b !== undefined && b.workerId === target.worker.id && b.dpRank === target.dpRank) sessions.touch(s.id);
    else sessions.bind(s.id, target.worker.id, target.dpRank, s.timeoutSecs !== undefined ? s.timeoutSecs * 1000 : undefined);
  }

  #prefillRef(): DisaggRef {
    const t = this.#target!;
    const info = prefillWorkerInfo(this.tracker, { workerId: t.worker.id, dpRank: t.dpRank }, this.#prefillPayload);
    return { workerId: info!.workerId, dpRank: info!.dpRank ?? t.dpRank };
  }

  #outcomeNoted = false;

  #noteOutcome(outcome: 'decoded' | 'prefill_failed' | 'decode_failed'): void {
    if (this.#outcomeNoted || this.#target === undefined) return;
    this.#outcomeNoted = true;
    this.#deps.metrics?.disaggRequests.labels({
      model: this.#deps.model, prefill_worker_id: String(this.#prefillRef().workerId), handoff: this.#path ?? 'sync', outcome,
    }).inc();
  }

  /** The decode leg is over for the client: stop listening to its signal, observe the transfer estimate. */
  #end(): void {
    if (this.#ended) return;
    this.#ended = true;
    if (this.#onClientAbort !== undefined) this.#leg.signal.removeEventListener('abort', this.#onClientAbort);
    // Only the synchronous handoff orders "prefill answered, then decode's first token"; in the bootstrap
    // pair the prefill's answer may come after decode started, which makes the difference meaningless.
    if (this.#path !== 'sync') return;
    const ms = this.tracker.kvTransferEstimatedMs();
    if (ms !== undefined && ms >= 0) this.#deps.metrics?.kvTransferEstimated.labels({ model: this.#deps.model }).observe(ms / 1000);
  }
}

/** An event that carries generated output (or ends the stream): proof that the decode engine has the KV. */
function isOutput(ev: EngineEvent): boolean {
  if (ev.done) return true;
  if (ev.json === undefined) return false;
  const info = readChunkInfo(ev.json);
  return (info.tokenIds ?? 0) > 0 || info.outputChoices > 0 || info.finishReason !== undefined;
}
