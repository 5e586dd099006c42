/**
 * What a disaggregated request hands back, and how a prefill failure is
 * reported (shared by the flow and both handoff strategies).
 */
import type { WorkerRank } from '../../common/index.js';
import type { RequestTracker } from '../../core/index.js';
import { KvgateError, isKvgateError } from '../../errors/index.js';
import type { Selection } from '../push/types.js';
import type { HandoffPath } from './handoff.js';

/** An SSE event handed to the client: the engine's own bytes, or re-serialised data when kvgate patched it. */
export interface DisaggSseEvent {
  readonly raw?: Uint8Array | undefined;
  readonly data: string;
}

export type DisaggBody =
  | { readonly kind: 'sse'; readonly events: AsyncIterable<DisaggSseEvent> }
  | { readonly kind: 'json'; readonly bytes: Uint8Array | string };

export interface DisaggOutcome {
  /** The worker whose answer this is: the decode worker, or the prefill worker when it refused the request (4xx). */
  readonly worker: WorkerRank;
  /** The prefill worker, in Dynamo's attribution order. */
  readonly prefillWorker: WorkerRank;
  readonly handoff: HandoffPath;
  readonly status: number;
  readonly body: DisaggBody;
  readonly tracker: RequestTracker;
}

/** Failures of the request itself keep their code; engine and transport failures of the prefill leg become KVG_ERR_PREFILL_FAILED. */
const KEEP_CODES = new Set([
  'KVG_ERR_CLIENT_ABORTED',
  'KVG_ERR_BACKPRESSURE',
  'KVG_ERR_OVERLOADED',
  'KVG_ERR_QUEUE_SHED',
  'KVG_ERR_NO_WORKERS',
  'KVG_ERR_UNKNOWN_WORKER',
  'KVG_ERR_INVALID_DP_RANK',
  'KVG_ERR_MISSING_WORKER_ID',
  'KVG_ERR_NO_DISAGGREGATED_PARAMS',
  'KVG_ERR_INVALID_ARGUMENT',
  'KVG_ERR_DUPLICATE_REQUEST',
  'KVG_ERR_PREFILL_FAILED',
]);

export function prefillFailure(err: unknown, target: Selection | undefined): KvgateError {
  if (isKvgateError(err) && KEEP_CODES.has(err.code)) return err;
  const where = target === undefined ? '' : ` on worker ${target.slot.workerId} (dp rank ${target.slot.dpRank})`;
  const why = err instanceof Error ? err.message : String(err);
  return new KvgateError(
    'KVG_ERR_PREFILL_FAILED',
    `prefill${where} failed: ${why}`,
    {
      workerId: target?.slot.workerId,
      dpRank: target?.slot.dpRank,
      cause: isKvgateError(err) ? err.code : undefined,
    },
    { cause: err },
  );
}

/**
 * Failures of an SGLang decode leg that reached its engine and broke before its first output: the
 * engine answered 5xx, timed out or dropped the connection while it waited for the prefill's KV.
 * (Nothing sent, a client abort or a refusal keep their own meaning.)
 */
const RENDEZVOUS_FAILURES = new Set([
  'KVG_ERR_ENGINE_FAILED',
  'KVG_ERR_ENGINE_DISCONNECTED',
  'KVG_ERR_ENGINE_HEADERS_TIMEOUT',
  'KVG_ERR_ENGINE_BODY_TIMEOUT',
  'KVG_ERR_ENGINE_STREAM_BROKEN',
]);

export function failedAtRendezvous(err: unknown): boolean {
  return isKvgateError(err) && RENDEZVOUS_FAILURES.has(err.code);
}
