/**
 * The disaggregated path of an offline run (P prefill + D decode engines):
 * each arrival becomes a `DisaggFlow` that goes through two legs.
 *
 * When its decode worker is chosen and booked (`DisaggOrder`):
 * - `kvgate` (the default: what the gateway does, src/routing/disagg/decode-slot.ts):
 *   the decode slot is booked first, at arrival, and only then is the prefill
 *   routed. A decode side that refuses the request (every decode worker
 *   overloaded) fails it before any prefill work is spent; one that queues it
 *   holds its prefill back too. The decode leg then goes to the booked worker.
 * - `dynamo` (NVIDIA Dynamo's PrefillRouter, for comparison: a policy named
 *   `<policy>+dynamo-order`): the prefill is routed first; the decode worker
 *   right after it under `bootstrap` (SGLang), after the prefill's response
 *   under `kv_transfer_params` (vLLM NIXL). A decode refusal comes after the
 *   prefill was booked (bootstrap) or ran (vLLM).
 *
 * Under either protocol the prefill runs with max_tokens 1 and, when it
 * completes, the decode engine receives the request with its prompt KV remote
 * and waits the transfer (uncached tokens x kv bytes per token / bandwidth)
 * before decoding. Simplification: the decode engine reserves the request's
 * KV blocks when the prefill completes, not when an SGLang decode is sent
 * (once the prefill engine has the request), so under the `kvgate` order the
 * two protocols run alike. The prefill engine holds the request's blocks
 * (lease `kvLeaseMs`) until the decode engine's first token, which follows
 * the transfer.
 * The prefill router is a KV router with active-block tracking off (Dynamo
 * activates it so); the decode router runs with overlap credit 0, no
 * assumed reuse and no prefill tracking (Dynamo's decode override). Simple
 * policies use the same mode on both pools.
 */
import type { ManualClock } from '../common/index.js';
import type { CoreRequest } from '../mocker/index.js';
import type { Arrival, OfflineLegs } from './offline-legs.js';
import { generationSeed, type Engine, type PoolState } from './offline-pools.js';
import type { DisaggOrder, RouteChoice, RouteRequest } from './policy.js';
import type { PoolPins } from './session-pins.js';

export type DisaggProtocol = 'bootstrap' | 'kv_transfer_params';
export const DISAGG_PROTOCOLS: readonly DisaggProtocol[] = ['bootstrap', 'kv_transfer_params'];

/** One disaggregated request between its legs: the decode leg starts once the prefill is done and the decode worker is known. */
interface DisaggFlow extends Arrival {
  /** The prefill leg's id on its engine (the decode leg uses `key`). */
  readonly prefillId: string;
  decodeChoice: RouteChoice | null;
  prefillDoneAt: number | null;
  prefillEngine: Engine | null;
}

export interface DisaggArrivalsOptions {
  readonly legs: OfflineLegs;
  readonly clock: ManualClock;
  /** The prefill pool, then the decode pool. */
  readonly pools: readonly [PoolState, PoolState];
  /** By worker id. */
  readonly engines: readonly Engine[];
  readonly protocol: DisaggProtocol;
  /** When the decode worker is booked: before the prefill (the gateway's order, the default) or Dynamo's. */
  readonly order?: DisaggOrder | undefined;
  /** The run's seed (each request's generated tokens derive from it). */
  readonly seed: number;
  /** How long a prefill engine holds a request's blocks for the decode engine. */
  readonly kvLeaseMs: number;
  /** Session pins (`session_affinity: pin`), the prefill pool's then the decode pool's; absent: none. */
  readonly pins?: readonly [PoolPins, PoolPins] | undefined;
}

/** The P/D path of one run: `arrive` starts a request's legs; `leaseExpired` is read after the run. */
export class DisaggArrivals {
  readonly #opts: DisaggArrivalsOptions;
  /** Prefill leases that had expired when the decode leg's KV arrived. */
  #leaseExpired = 0;

  constructor(opts: DisaggArrivalsOptions) {
    this.#opts = opts;
  }

  get leaseExpired(): number {
    return this.#leaseExpired;
  }

  arrive(a: Arrival): void {
    const flow: DisaggFlow = {
      ...a,
      prefillId: `${a.key}:prefill`,
      decodeChoice: null,
      prefillDoneAt: null,
      prefillEngine: null,
    };
    // The gateway books the decode slot before anything is sent (decode-slot.ts); Dynamo routes the prefill first.
    if (this.#opts.order === 'dynamo') this.#routePrefill(flow);
    else this.#routeDecode(flow, () => this.#routePrefill(flow));
  }

  /** Routes and books the prefill worker, then starts the prefill (a refusal releases a decode slot already booked). */
  #routePrefill(flow: DisaggFlow): void {
    const { legs, pools, engines, protocol } = this.#opts;
    const { o, key } = flow;
    const [prefillPool, decodePool] = pools;
    const dynamo = this.#opts.order === 'dynamo';
    const pins = this.#opts.pins?.[0];
    legs.routeThen(
      prefillPool.router,
      { key, tokens: flow.tokens, expectedOutputTokens: 1, replica: flow.replica },
      pins?.candidates(flow.r.session) ?? prefillPool.workerIds,
      (p, t) => {
        pins?.served(flow.r.session, p.workerId);
        o.prefillWorkerId = p.workerId;
        o.predictedCachedTokens = p.predictedCachedTokens;
        flow.prefillEngine = engines[p.workerId]!;
        // Dynamo's order: SGLang's bootstrap path routes decode as soon as the prefill is routed; vLLM's after its response.
        if (dynamo && protocol === 'bootstrap') this.#routeDecode(flow, () => this.#startDecode(flow));
        if (o.error !== null) {
          prefillPool.router.finished(key);
          return;
        }
        this.#startPrefill(flow, flow.prefillEngine, t);
      },
      (err) => {
        if (flow.decodeChoice !== null) decodePool.router.finished(key);
        legs.fail(o, err);
      },
    );
  }

  /** The prefill leg: max_tokens 1, blocks held under the lease for the decode engine. */
  #startPrefill(flow: DisaggFlow, pe: Engine, t: number): void {
    const { legs, pools, seed, kvLeaseMs, protocol } = this.#opts;
    const { r, o, key } = flow;
    const [prefillPool, decodePool] = pools;
    const req: CoreRequest = {
      id: flow.prefillId,
      promptTokens: flow.tokens,
      maxTokens: 1,
      seed: generationSeed(seed, r.index),
      holdBlocksMs: kvLeaseMs,
    };
    legs.submit(pe, r, req, t, {
      onAdmitted: (cached, at) => legs.admitted(o, r, cached, at),
      onToken: (_id, index) => {
        if (index === 0) prefillPool.router.prefillCompleted(key);
      },
      onFinish: (_info, at) => {
        prefillPool.router.finished(key);
        o.prefillDoneMs = at;
        flow.prefillDoneAt = at;
        // Only Dynamo's vLLM order has no decode worker yet (it is routed now, after the prefill's response).
        if (this.#opts.order === 'dynamo' && protocol === 'kv_transfer_params')
          this.#routeDecode(flow, () => this.#startDecode(flow));
        else this.#startDecode(flow);
      },
      onError: (err) => {
        prefillPool.router.finished(key);
        if (flow.decodeChoice !== null) decodePool.router.finished(key);
        legs.fail(o, err);
      },
    });
  }

  /** Routes and books the decode worker, then `then` (the prefill under the gateway's order, else the decode leg). */
  #routeDecode(flow: DisaggFlow, then: () => void): void {
    const { legs } = this.#opts;
    const decodePool = this.#opts.pools[1];
    const req: RouteRequest = {
      key: flow.key,
      tokens: flow.tokens,
      expectedOutputTokens: flow.r.outputLength,
      replica: flow.replica,
    };
    const pins = this.#opts.pins?.[1];
    legs.routeThen(
      decodePool.router,
      req,
      pins?.candidates(flow.r.session) ?? decodePool.workerIds,
      (d) => {
        pins?.served(flow.r.session, d.workerId);
        flow.decodeChoice = d;
        flow.o.workerId = d.workerId;
        then();
      },
      (err) => {
        if (flow.prefillEngine !== null) flow.prefillEngine.ve.core.abort(flow.prefillId);
        legs.fail(flow.o, err);
      },
    );
  }

  /** The decode leg, once both the prefill is done and the decode worker is known; its KV transfer precedes its first token. */
  #startDecode(flow: DisaggFlow): void {
    if (flow.decodeChoice === null || flow.prefillDoneAt === null || flow.prefillEngine === null) return;
    const { legs, clock, seed } = this.#opts;
    const { r, o, key } = flow;
    const pe = flow.prefillEngine;
    const decodePool = this.#opts.pools[1];
    const decodeEngine = this.#opts.engines[flow.decodeChoice.workerId]!;
    const at = Math.max(flow.prefillDoneAt, clock.now());
    o.decodeStartMs = at;
    const req: CoreRequest = {
      id: key,
      promptTokens: flow.tokens,
      maxTokens: r.outputLength,
      seed: generationSeed(seed, r.index),
      remotePrefill: true,
    };
    legs.submit(decodeEngine, r, req, at, {
      onAdmitted: (cached) => {
        o.transferEstimateMs = decodeEngine.ve.core.transferMs(r.inputLength - cached);
      },
      onToken: (_id, index, tt) => {
        o.outputTokens = index + 1;
        if (index === 0) {
          o.firstTokenMs = tt;
          decodePool.router.prefillCompleted(key);
          // The KV has arrived (the transfer precedes the first token): the prefill engine's lease ends.
          if (!pe.ve.core.pullHeld(flow.prefillId, undefined, tt).ok) this.#leaseExpired++;
        }
        decodePool.router.outputTokens(key, index + 1);
      },
      onFinish: (_info, tt) => {
        o.finishMs = tt;
        decodePool.router.finished(key);
        legs.finish(o);
      },
      onError: (err) => {
        decodePool.router.finished(key);
        pe.ve.core.abort(flow.prefillId);
        legs.fail(o, err);
      },
    });
  }
}
