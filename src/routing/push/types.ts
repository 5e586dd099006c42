/**
 * The shapes one leg of a request takes inside a push router: the leg as
 * routed (`LegRequest`), where it goes (`Selection`), and the engine's answer
 * (`LegResponse`). A `LegRequest` is a `KvRouteRequest`, so the KV selector
 * hands it to the KvRouter as is.
 */
import type { CancelSignal, RoutingHints, WorkerRank, WorkerRole } from '../../common/index.js';
import type { RequestTracker, RoutingDecision } from '../../core/index.js';
import type { WorkerInfo } from '../../discovery/index.js';
import type { EngineEvent, LegFields } from '../../engines/index.js';
import type { PromptHashes } from '../../wasm/index.js';

/** One leg of a request, ready to route. */
export interface LegRequest {
  /** Context id; unique among this router's in-flight legs (the bookkeeping's key). */
  readonly requestId: string;
  /**
   * The client's request id, sent to engines as `x-request-id` (they build their response ids
   * from it, so the client sees its own id); `requestId` when absent. Not unique: clients resend ids.
   */
  readonly clientRequestId?: string | undefined;
  /** Engine path: /v1/chat/completions or /v1/completions. */
  readonly path: string;
  /** The client's body, forwarded as sent (plus `leg` fields). */
  readonly body: Readonly<Record<string, unknown>>;
  readonly stream: boolean;
  readonly isl: number;
  readonly hashes: PromptHashes;
  /** Milliseconds the frontend spent hashing the prompt (the routing overhead's block_hashing stage). */
  readonly hashingMs?: number | undefined;
  /** The frontend's hints, validated once (the router-config override included), carried unchanged. */
  readonly routing: RoutingHints;
  /** Which pin applies (see `resolvePin` / `directPin`). */
  readonly phase: WorkerRole;
  /** Extra body fields and headers for this leg (P/D handoff). */
  readonly legFields?: LegFields | undefined;
  readonly signal: CancelSignal;
  readonly tracker?: RequestTracker | undefined;
  /** Arrival time on the router clock (TTFT is measured from here). */
  readonly receivedAt: number;
  /** Ask a vLLM engine for its token ids (`return_token_ids`): a migration resumes from them. */
  readonly returnTokenIds?: boolean | undefined;
  /** Called once the request is on a socket to the engine (the bootstrap path waits for it). */
  readonly onDispatched?: (() => void) | undefined;
  /** Which continuation of a migrated stream this leg is (1 for the first migration); absent on the original leg. */
  readonly migration?: number | undefined;
}

/** Where a leg goes: the (worker, dp rank) slot, and the worker it names. */
export interface Selection {
  readonly slot: WorkerRank;
  /** The registry's record of `slot.workerId` (its URL, dialect, ranks) for dispatch. */
  readonly worker: WorkerInfo;
  /** Predicted cached blocks on the chosen worker (0 outside KV mode). */
  readonly overlapBlocks: number;
  /** True when a pin chose the worker. */
  readonly pinned: boolean;
  readonly decision: RoutingDecision | undefined;
}

export type LegBody =
  | { readonly kind: 'sse'; readonly events: AsyncIterable<EngineEvent> }
  | { readonly kind: 'json'; readonly bytes: Uint8Array | string; readonly json: unknown };

export interface LegResponse {
  readonly selection: Selection;
  readonly status: number;
  readonly body: LegBody;
}
