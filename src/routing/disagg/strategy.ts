/**
 * One strategy per handoff protocol: how the KV of a prefill reaches its
 * decode worker. The shared flow (disagg-request.ts) chooses and books the
 * prefill worker, dispatches the prefill leg with the strategy's fields, and
 * then hands over to the strategy, which decides when and how decode starts.
 * - bootstrap.ts: SGLang's bootstrap rendezvous (both legs at once).
 * - kv-transfer.ts: vLLM's `kv_transfer_params` ticket (prefill to completion, then decode).
 */
import type { RequestTracker } from '../../core/index.js';
import type { LegFields } from '../../engines/index.js';
import type { KvgateError } from '../../errors/index.js';
import type { LegRequest, LegResponse, Selection } from '../push/types.js';
import type { HandoffPath } from './handoff.js';
import type { DisaggOutcome } from './types.js';

/** The dispatched prefill leg, as the shared flow lets a strategy drive it. */
export interface PrefillInFlight {
  /** The request as the host routed it. */
  readonly base: LegRequest;
  /** The prefill worker (booked). */
  readonly target: Selection;
  readonly tracker: RequestTracker;
  /** The prefill leg's answer. */
  readonly response: Promise<LegResponse>;
  /** Resolves once the prefill engine has the request (it is on a socket). */
  readonly accepted: Promise<void>;
  /** The prefill failure recorded so far. */
  readonly error: KvgateError | undefined;
  /** Records the prefill's failure once (session, partner cancellation, metrics); returns the failure to report. */
  fail(err: unknown): KvgateError;
  /** The prefill answered: its payload names who ran it (attribution). */
  answered(res: LegResponse): void;
  /** Settles when the prefill leg has ended (its bookkeeping released); must never reject. */
  setEnded(ended: Promise<void>): void;
  /** The prefill leg is over: decode may take the phase, and `accepted` can no longer resolve. */
  prefillLegOver(): void;
  /** Lets decode take the phase (the prefill's routing is recorded). */
  releasePermit(): void;
  /** Routes and dispatches the decode leg with the handoff's fields. */
  decode(handoff: LegFields, promptTokensDetails: Record<string, unknown> | undefined): Promise<DisaggOutcome>;
  /** The prefill engine refused the request itself (4xx): the client gets its answer. */
  refused(res: LegResponse): DisaggOutcome;
  /**
   * Bootstrap: the prefill engine refused the request itself (4xx) while its decode partner is under
   * way: decode is cancelled (or not sent) and the decode step answers with this refusal.
   */
  refuse(res: LegResponse): void;
}

export interface Handoff {
  readonly path: HandoffPath;
  /** Extra body fields and headers of the prefill leg. */
  readonly prefillFields: LegFields;
  /** From the dispatched prefill to the started decode. */
  handOver(prefill: PrefillInFlight): Promise<DisaggOutcome>;
}
