/**
 * Pure pieces of the prefill -> decode handoff, as Dynamo's PrefillRouter does it: which
 * protocol a prefill worker speaks, the SGLang bootstrap triple, the decode
 * router's override, the decode leg built from the request's, the prefill
 * worker's attribution, and the usage details a synchronous prefill hands to
 * the client's answer.
 */
import type { RouterConfigOverride, Rng, WorkerPin, WorkerRank } from '../../common/index.js';
import {
  computeBootstrapRoom,
  parseRouterConfigOverride,
  randomRoomSeed,
  type KvRouterOptions,
  type RequestTracker,
} from '../../core/index.js';
import type { WorkerInfo } from '../../discovery/index.js';
import {
  NO_LEG_FIELDS,
  mergeLegFields,
  oneTokenPrefillFields,
  type BootstrapInfo,
  type LegFields,
} from '../../engines/index.js';
import type { LegRequest } from '../push/types.js';

/** How the KV moves: SGLang's bootstrap rendezvous (both legs at once) or the synchronous vLLM ticket. */
export type HandoffPath = 'bootstrap' | 'sync';

/**
 * The bootstrap path needs an SGLang worker that advertises its bootstrap
 * endpoint; every other worker (vLLM, or one without an endpoint) takes the
 * synchronous path.
 */
export function handoffPath(w: WorkerInfo): HandoffPath {
  return w.dialect === 'sglang' && w.bootstrap !== undefined ? 'bootstrap' : 'sync';
}

/** Why a prefill worker's bootstrap endpoint is unusable, or undefined when it is fine (or absent). */
export function bootstrapProblem(w: WorkerInfo): string | undefined {
  const b = w.bootstrap;
  if (b === undefined)
    return w.dialect === 'sglang' ? 'an SGLang prefill worker needs a bootstrap endpoint' : undefined;
  if (typeof b.host !== 'string' || b.host.length === 0) return 'bootstrap host is empty';
  if (!Number.isInteger(b.port) || b.port < 1 || b.port > 65535)
    return `bootstrap port ${String(b.port)} is not in 1..65535`;
  return undefined;
}

/**
 * The triple for a prefill on (worker, dpRank): the worker's advertised
 * endpoint and a fresh room that encodes the rank, `room % dpSize ==
 * dpRank - dpStart` (SGLang's decode side reads the prefill rank that way,
 * counting ranks from the worker's first one).
 */
export function bootstrapFor(w: WorkerInfo, dpRank: number, rng: Rng): BootstrapInfo {
  const b = w.bootstrap!;
  const room = computeBootstrapRoom(dpRank - w.dpStart, w.dpSize, randomRoomSeed(rng));
  return { host: b.host, port: b.port, room };
}

/**
 * The decode router's override (Dynamo's): the prefill worker computed the
 * prompt, so decode workers get no overlap credit, no KV-reuse assumption and
 * no prefill-token load; the request's other override fields are kept.
 */
export function decodeOverrideOf(existing: RouterConfigOverride | undefined): RouterConfigOverride {
  return Object.freeze({ ...existing, overlapScoreCredit: 0, assumeKvReuse: false, trackPrefillTokens: false });
}

/** How a request's decode leg is sent: its own cancellation and tracker, and what the client still wants. */
export interface DecodeLegOptions {
  readonly signal: LegRequest['signal'];
  readonly tracker: RequestTracker;
  /** The client already left: decode only has to take the KV off the prefill engine, one token does that. */
  readonly clientGone: boolean;
  /** Ask the decode engine for its token ids (a migration resumes from them); never once the client left. */
  readonly tokenIds: boolean;
}

/**
 * The decode leg of `base` whose prefill ran on `prefill`: the prefill worker recorded in its routing, the
 * no-overlap override (`decodeOverrideOf`), and the handoff's fields laid over the request's own.
 */
export function decodeLegOf(
  base: LegRequest,
  prefill: WorkerRank,
  handoff: LegFields,
  opts: DecodeLegOptions,
): LegRequest {
  const gone = opts.clientGone;
  return {
    ...base,
    phase: 'decode',
    stream: gone ? false : base.stream,
    routing: {
      ...base.routing,
      prefillWorkerId: prefill.workerId,
      prefillDpRank: prefill.dpRank,
      routerConfigOverride: decodeOverrideOf(base.routing.routerConfigOverride),
    },
    legFields: mergeLegFields(
      base.legFields ?? NO_LEG_FIELDS,
      handoff,
      gone ? { fields: oneTokenPrefillFields(base.body), headers: {} } : NO_LEG_FIELDS,
    ),
    signal: opts.signal,
    tracker: opts.tracker,
    onDispatched: undefined,
    ...(opts.tokenIds && !gone ? { returnTokenIds: true } : {}),
  };
}

/** `decodeOverrideOf` for a caller's raw override (camelCase or snake_case), validated here once: the library and replay edge. */
export function decodeRouterOverride(raw: Readonly<Record<string, unknown>> | undefined): RouterConfigOverride {
  return decodeOverrideOf(raw === undefined ? undefined : parseRouterConfigOverride(raw));
}

/**
 * Who ran the prefill, in Dynamo's order: (1) the tracker's prefill slot
 * (the prefill router records it while routing); (2) the explicit target the
 * request was sent to; (3) `routing_data.worker_id.prefill_worker_id` in the
 * prefill's answer (a standalone router upstream). Undefined when none knows.
 */
export function prefillWorkerInfo(
  tracker: RequestTracker | undefined,
  directTarget: WorkerPin | undefined,
  payload: unknown,
): WorkerPin | undefined {
  const t = tracker?.workers();
  if (t?.prefillWorkerId !== undefined) return { workerId: t.prefillWorkerId, dpRank: t.prefillDpRank };
  if (directTarget !== undefined) return directTarget;
  const ids = obj(obj(obj(payload)?.['routing_data'])?.['worker_id']);
  const id = ids?.['prefill_worker_id'];
  if (typeof id === 'number' && Number.isSafeInteger(id) && id >= 0) {
    const rank = ids!['prefill_dp_rank'];
    return { workerId: id, dpRank: typeof rank === 'number' && Number.isSafeInteger(rank) ? rank : undefined };
  }
  return undefined;
}

function obj(value: unknown): Record<string, unknown> | undefined {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
    ? (value as Record<string, unknown>)
    : undefined;
}

/**
 * The response object with `usage.prompt_tokens_details` replaced by the
 * prefill engine's (it computed the prompt, so its prefix-cache hits are the
 * ones the client paid less for). Undefined when there is no usage to patch.
 */
export function withPromptTokensDetails(
  json: unknown,
  details: Readonly<Record<string, unknown>>,
): Record<string, unknown> | undefined {
  const root = obj(json);
  const usage = obj(root?.['usage']);
  if (root === undefined || usage === undefined) return undefined;
  return { ...root, usage: { ...usage, prompt_tokens_details: { ...details } } };
}

/**
 * The prefill pool's router config: no active- or output-block tracking (a
 * prefill scheduler scores on overlap and prompt-token load only).
 */
export function prefillPoolConfig(options: KvRouterOptions | undefined): KvRouterOptions {
  return { ...options, routerTrackActiveBlocks: false, routerTrackOutputBlocks: false };
}
