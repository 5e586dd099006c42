/**
 * The engine's side of a prefill/decode handoff, one strategy per protocol:
 * vLLM's kv_transfer_params (pd-vllm.ts) and SGLang's bootstrap rendezvous
 * (pd-sglang.ts). Generation asks the worker's strategy to `prepare` each
 * request before it reaches an engine rank; the plan it gets back says how
 * the request runs there and whom to tell when it ends.
 */
import type { FinishedRequest } from './engine-types.js';
import type { GenerateRequest } from './openai-protocol.js';

/** How one request runs on this engine, as its P/D protocol decided. */
export interface HandoffPlan {
  /** The prompt's KV came from a prefill engine: it is transferred, not computed. */
  readonly remotePrefill: boolean;
  /** Keep the blocks this long after finishing, for a remote decode to pull. */
  readonly holdBlocksMs: number | undefined;
  /** The data-parallel rank the protocol fixed (SGLang prefill: the room's rank). */
  readonly forcedRank: number | undefined;
  /** Overrides the request's max_tokens (a prefill leg generates 1 token). */
  readonly maxTokens: number | undefined;
  /** The request finished on its rank. */
  finished?(info: FinishedRequest): void;
  /** The request failed after `prepare` (on the engine, or before it got there). */
  failed?(err: unknown): void;
}

/** The facts a protocol may name in its response (vLLM's ticket names the engine and the block ids). */
export interface FinishedOn {
  readonly info: FinishedRequest;
  readonly rank: number;
  /** The engine core's id of the request. */
  readonly requestId: string;
}

export interface HandoffProtocol {
  /**
   * This engine's part of the handoff before scheduling: pulls or waits for
   * a remote prefill, or registers as one. Undefined when the request was
   * cancelled meanwhile (the caller then drops it silently).
   * @throws KvgateError KVG_ERR_INVALID_REQUEST, KVG_ERR_KV_TRANSFER_FAILED, KVG_ERR_REQUEST_TIMEOUT, KVG_ERR_INVALID_DP_RANK
   */
  prepare(p: GenerateRequest, promptTokens: number, signal: AbortSignal): Promise<HandoffPlan | undefined>;
  /** The `kv_transfer_params` of a non-streamed response (null when there is none). */
  responseParams(done: FinishedOn): unknown;
}

/** The plan of a request prefilled and decoded on this engine. */
export const LOCAL_PLAN: HandoffPlan = Object.freeze({
  remotePrefill: false,
  holdBlocksMs: undefined,
  forcedRank: undefined,
  maxTokens: undefined,
});

/** An aggregated engine without a handoff protocol: every request is prefilled and decoded here. */
export const noHandoff: HandoffProtocol = {
  prepare: () => Promise.resolve(LOCAL_PLAN),
  responseParams: () => null,
};
