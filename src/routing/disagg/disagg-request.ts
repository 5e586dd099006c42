/**
 * One disaggregated request: prefill on the prefill pool, then decode on the decode pool (Dynamo's
 * PrefillRouter flow), with its failure and cancellation rules. Built and run by the PrefillRouter.
 *
 *   setPhase(prefill) -> book the decode slot (decode-slot.ts; refused: the client's 503, nothing sent)
 *     -> choose + book the prefill worker (sticky, pinned or best) -> dispatch the prefill with the
 *        handoff's fields; the handoff strategy decides when decode starts (bootstrap.ts for SGLang,
 *        kv-transfer.ts for vLLM; see strategy.ts)
 *   setPhase(decode) -> decode dispatched on the booked slot with the no-overlap override
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
 * - a prefill refused by its engine (4xx) answers the client with that refusal
 *   (bootstrap: its decode half is cancelled); an SGLang decode half failing
 *   before its first output failed the rendezvous, reported as the prefill's
 *   failure (one code per cause, docs/errors.md).
 * - a failed prefill fails the request; nothing is retried aggregated. A
 *   prefill worker that could not be reached (nothing sent) is reported in
 *   `unreachableWorker` so the PrefillRouter can run the request again.
 * Every path releases the bookkeeping of both legs: each leg's PushRouter
 * guard frees its booking when the leg ends, however it ends.
 */
import { Cancellation, type SessionHint, type WorkerRank } from '../../common/index.js';
import { RequestTracker } from '../../core/index.js';
import type { LegFields } from '../../engines/index.js';
import { KvgateError, isKvgateError } from '../../errors/index.js';
import type { RouterContext } from '../context.js';
import type { LegRequest, LegResponse, Selection } from '../push/types.js';
import type { PushRouter } from '../push/push-router.js';
import type { StickySessions } from '../sticky-sessions.js';
import { bootstrapHandoff } from './bootstrap.js';
import { abandonDecode, decodeEvents, type DecodeProgress } from './decode-stream.js';
import { DecodeSlot } from './decode-slot.js';
import { decodeLegOf, handoffPath, prefillWorkerInfo, withPromptTokensDetails, type HandoffPath } from './handoff.js';
import { kvTransferHandoff } from './kv-transfer.js';
import type { Handoff, PrefillInFlight } from './strategy.js';
import { failedAtRendezvous, prefillFailure, type DisaggOutcome } from './types.js';

/** Picks and books (or peeks) the prefill worker: sticky session, then pinned id, then the router's best. */
export type PrefillResolver = (
  leg: LegRequest,
  session: SessionHint | undefined,
  mode: 'book' | 'query',
) => Promise<Selection>;

export interface DisaggRequestOptions {
  readonly model: string;
  readonly pool: PushRouter;
  readonly decode: PushRouter;
  readonly resolve: PrefillResolver;
  readonly sessions: StickySessions;
  /** Decode workers this request must not use (they failed it earlier: a migrated continuation). */
  readonly decodeExclude?: ReadonlySet<number> | undefined;
  /** Ask the decode engine for its token ids (the PrefillRouter migrates the stream from them). */
  readonly tokenIds?: boolean | undefined;
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

export class DisaggRequest {
  readonly #deps: DisaggRequestOptions;
  readonly #ctx: RouterContext;
  readonly #leg: LegRequest;
  readonly #session: SessionHint | undefined;
  readonly tracker: RequestTracker;
  /** Cancels the prefill leg (only before it reached an engine, or when its decode partner failed). */
  readonly #prefillCtl = new Cancellation();
  /** Cancels the decode leg (client gone after KV receipt, or its prefill partner failed first). */
  readonly #decodeCtl = new Cancellation();
  #target: Selection | undefined;
  #path: HandoffPath | undefined;
  #prefillDispatched = false;
  /** The decode slot, booked before the prefill is sent; handed to the decode leg's dispatch, else released. */
  #decodeSlot: DecodeSlot | undefined;
  #prefillError: KvgateError | undefined;
  /** The prefill's answer (for attribution from its payload). */
  #prefillPayload: unknown;
  /** SGLang: the prefill engine refused the request (4xx) while decode was under way; the client gets this answer. */
  #refusal: LegResponse | undefined;
  #decodeOutput = false;
  #clientGone = false;
  #ended = false;
  #onClientAbort: (() => void) | undefined;
  #unreachable: number | undefined;
  /** Settles when the prefill leg has ended (its bookkeeping released); never rejects. */
  prefillEnded: Promise<void> = Promise.resolve();
  /** What the decode stream reads of this request and tells it. */
  readonly #progress: DecodeProgress;

  constructor(deps: DisaggRequestOptions, ctx: RouterContext, leg: LegRequest, session: SessionHint | undefined) {
    this.#deps = deps;
    this.#ctx = ctx;
    this.#leg = leg;
    this.#session = session;
    this.tracker = leg.tracker ?? new RequestTracker(ctx.clock);
    const self = this;
    this.#progress = {
      get prefillError() {
        return self.#prefillError;
      },
      get hasOutput() {
        return self.#decodeOutput;
      },
      output: () => this.#onDecodeOutput(),
      end: () => this.#end(),
    };
  }

  /** The prefill worker that could not be reached when the request failed so (nothing sent: it may run elsewhere). */
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
          reject(
            new KvgateError(
              'KVG_ERR_CLIENT_ABORTED',
              'the client went away during the disaggregated request',
              undefined,
              { cause: signal.reason },
            ),
          );
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
            void abandonDecode(out, this.#progress);
          }
        },
        (err: unknown) => {
          this.#end();
          if (!settled) {
            settled = true;
            reject(err);
          } else if (!isKvgateError(err, 'KVG_ERR_CLIENT_ABORTED')) {
            this.#ctx.logger.warn(
              { requestId: this.#leg.requestId, err: String(err) },
              'disaggregated request failed after the client left',
            );
          }
        },
      );
    });
  }

  /** Books the prefill worker, dispatches the prefill with the handoff's fields, then lets the handoff take it to decode. */
  async #flow(): Promise<DisaggOutcome> {
    const base = this.#leg;
    const tracker = this.tracker;
    const permit = await tracker.setPhase('prefill');
    if (this.#prefillCtl.signal.aborted) {
      permit.release();
      throw new KvgateError('KVG_ERR_CLIENT_ABORTED', 'the client went away before the prefill was routed');
    }
    // Booked before anything is sent (decode-slot.ts): a refusal is the client's 503.
    try {
      this.#decodeSlot = await DecodeSlot.book(
        this.#deps.decode,
        base,
        this.#prefillCtl.signal,
        tracker,
        this.#deps.decodeExclude,
      );
    } catch (err) {
      permit.release();
      throw err;
    }
    try {
      return await this.#prefillAndHandOver(permit);
    } finally {
      this.#decodeSlot.release();
    }
  }

  /** Books and dispatches the prefill with the handoff's fields, then lets the handoff take it to decode. */
  async #prefillAndHandOver(permit: { release(): void }): Promise<DisaggOutcome> {
    const base = this.#leg;
    const tracker = this.tracker;
    const prefillBase: LegRequest = {
      ...base,
      phase: 'prefill',
      stream: false,
      signal: this.#prefillCtl.signal,
      tracker,
      onDispatched: undefined,
    };
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
    const handoff: Handoff =
      handoffPath(target.worker) === 'bootstrap'
        ? bootstrapHandoff(base, target, this.#ctx.rng)
        : kvTransferHandoff(base, target);
    this.#path = handoff.path;
    const admitted = deferred();
    const prefillLeg: LegRequest = {
      ...prefillBase,
      routing: { ...base.routing, prefillWorkerId: target.slot.workerId, prefillDpRank: target.slot.dpRank },
      legFields: handoff.prefillFields,
      onDispatched: () => {
        this.#prefillDispatched = true;
        this.#deps.sessions.served(this.#session, target.slot);
        // The prefill worker is recorded in the prefill slot (at routing); decode may now take the phase.
        permit.release();
        admitted.resolve();
      },
    };
    // This leg is never re-sent to another worker (the triple names this one, and attribution is write-once);
    // the PrefillRouter re-runs the whole request instead when the worker could not be reached.
    const response = this.#deps.pool.dispatch(prefillLeg, { ...target, pinned: true });
    return handoff.handOver(this.#inFlight(target, response, admitted, permit));
  }

  /** The view of the dispatched prefill a handoff strategy drives. */
  #inFlight(
    target: Selection,
    response: Promise<LegResponse>,
    admitted: Deferred,
    permit: { release(): void },
  ): PrefillInFlight {
    const self = this;
    return {
      base: this.#leg,
      target,
      tracker: this.tracker,
      response,
      accepted: admitted.promise,
      get error() {
        return self.#prefillError;
      },
      fail: (err) => {
        this.#prefillFailed(err);
        return this.#prefillError!;
      },
      answered: (res) => {
        this.#prefillPayload = res.body.kind === 'json' ? res.body.json : undefined;
      },
      setEnded: (ended) => {
        this.prefillEnded = ended;
      },
      prefillLegOver: () => {
        permit.release();
        admitted.reject(this.#prefillError);
      },
      releasePermit: () => permit.release(),
      decode: (leg, details) => this.#decode(leg, details),
      refused: (res) => this.#refused(res),
      refuse: (res) => {
        if (this.#prefillError !== undefined) return;
        this.#refusal = res;
        // Recorded as the prefill's error so decode is not sent (or is cancelled); the session keeps its worker.
        this.#prefillError = new KvgateError(
          'KVG_ERR_ENGINE_REJECTED',
          `prefill on worker ${target.worker.id} refused the request (${res.status})`,
        );
        if (!this.#decodeOutput) this.#decodeCtl.abort(this.#prefillError);
      },
    };
  }

  /** The prefill engine refused the request (4xx): its answer is the client's. */
  #refused(res: LegResponse): DisaggOutcome {
    this.#noteOutcome('prefill_failed');
    const target = this.#target!;
    const ref = target.slot;
    const bytes = res.body.kind === 'json' ? res.body.bytes : new Uint8Array();
    this.#end();
    return {
      worker: ref,
      prefillWorker: this.#prefillRef(),
      handoff: this.#path!,
      status: res.status,
      body: { kind: 'json', bytes },
      tracker: this.tracker,
    };
  }

  /** The decode leg, after the prefill handed over (sync) or was accepted (bootstrap). */
  async #decode(handoff: LegFields, promptTokensDetails: Record<string, unknown> | undefined): Promise<DisaggOutcome> {
    const base = this.#leg;
    const target = this.#target!;
    const permit = await this.tracker.setPhase('decode');
    if (this.#prefillError !== undefined) {
      permit.release();
      if (this.#refusal !== undefined) return this.#refused(this.#refusal);
      throw this.#prefillError;
    }
    // A client that already left gets a one-token decode: it only has to take the KV off the prefill engine.
    const leg = decodeLegOf(base, target.slot, handoff, {
      signal: this.#decodeCtl.signal,
      tracker: this.tracker,
      clientGone: this.#clientGone,
      tokenIds: this.#deps.tokenIds === true,
    });
    let res: LegResponse;
    try {
      // The slot booked before the prefill was sent: the dispatch owns it from here (its guard releases it).
      res = await this.#deps.decode.dispatch(leg, this.#decodeSlot?.take(), this.#deps.decodeExclude);
    } catch (err) {
      if (this.#refusal !== undefined) return this.#refused(this.#refusal);
      if (this.#prefillError === undefined) {
        // SGLang: before its first output the decode leg is half of the rendezvous, and its engine failing
        // there means the prefill's KV never arrived (rendezvous timeout, prefill engine gone): one cause,
        // reported as the prefill's failure whichever leg noticed it first.
        if (this.#path === 'bootstrap' && failedAtRendezvous(err)) this.#prefillFailed(err);
        else this.#noteOutcome('decode_failed');
        this.#cancelPrefillPartner(err);
      }
      // Cancelled because the prefill failed first: that failure is the one to report.
      throw this.#prefillError ?? err;
    } finally {
      permit.release();
    }
    if (res.status >= 400)
      this.#cancelPrefillPartner(
        new KvgateError('KVG_ERR_ENGINE_REJECTED', `decode refused the request (${res.status})`),
      );
    this.#noteOutcome(res.status >= 400 ? 'decode_failed' : 'decoded');
    const worker = res.selection.slot;
    const common = {
      worker,
      prefillWorker: this.#prefillRef(),
      handoff: this.#path!,
      status: res.status,
      tracker: this.tracker,
    };
    if (res.body.kind === 'json') {
      this.#onDecodeOutput();
      let bytes: Uint8Array | string = res.body.bytes;
      if (promptTokensDetails !== undefined && res.status < 400) {
        const patched = withPromptTokensDetails(res.body.json, promptTokensDetails);
        if (patched !== undefined) bytes = JSON.stringify(patched);
      }
      this.#end();
      return { ...common, body: { kind: 'json', bytes } };
    }
    return {
      ...common,
      body: { kind: 'sse', events: decodeEvents(res.body.events, promptTokensDetails, this.#progress) },
    };
  }

  #onDecodeOutput(): void {
    this.#decodeOutput = true;
    if (this.#clientGone) this.#decodeCtl.abort(this.#leg.signal.reason);
  }

  /** Records the prefill's failure once; in the bootstrap pair, cancels a decode that has not received its KV. */
  #prefillFailed(err: unknown): void {
    if (this.#prefillError !== undefined) return;
    const e = prefillFailure(err, this.#target);
    this.#prefillError = e;
    if (
      !this.#prefillDispatched &&
      (isKvgateError(err, 'KVG_ERR_ENGINE_UNREACHABLE') || isKvgateError(err, 'KVG_ERR_ENGINE_NOT_REGISTERED'))
    ) {
      this.#unreachable = this.#target?.worker.id;
    }
    this.#deps.sessions.refused(this.#session, e);
    if (this.#path === 'bootstrap' && !this.#decodeOutput) this.#decodeCtl.abort(e);
    if (!isKvgateError(err, 'KVG_ERR_CLIENT_ABORTED') || !this.#prefillCtl.signal.aborted)
      this.#noteOutcome('prefill_failed');
  }

  /** The decode half of an SGLang pair failed: its prefill would wait for a partner that never comes. */
  #cancelPrefillPartner(reason: unknown): void {
    if (this.#path === 'bootstrap') this.#prefillCtl.abort(reason);
  }

  #prefillRef(): WorkerRank {
    const t = this.#target!;
    const info = prefillWorkerInfo(this.tracker, t.slot, this.#prefillPayload);
    return { workerId: info!.workerId, dpRank: info!.dpRank ?? t.slot.dpRank };
  }

  #outcomeNoted = false;

  #noteOutcome(outcome: 'decoded' | 'prefill_failed' | 'decode_failed'): void {
    if (this.#outcomeNoted || this.#target === undefined) return;
    this.#outcomeNoted = true;
    this.#ctx.metrics?.disaggRequests
      .labels({
        model: this.#deps.model,
        prefill_worker_id: String(this.#prefillRef().workerId),
        handoff: this.#path ?? 'sync',
        outcome,
      })
      .inc();
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
    if (ms !== undefined && ms >= 0)
      this.#ctx.metrics?.kvTransferEstimated.labels({ model: this.#deps.model }).observe(ms / 1000);
  }
}
