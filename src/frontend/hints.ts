/**
 * Routing hints from the `nvext` body extension and the routing headers
 * (Dynamo's routing hints and query-only mode). The body is already schema-checked; this
 * module merges headers in, rejects contradictions, validates the per-request
 * router override with the core's parser, and detects query-only mode.
 *
 * Header -> hint: `x-worker-instance-id` (alias `x-dynamo-worker-instance-id`)
 * -> backendInstanceId; `x-prefill-instance-id` (alias
 * `x-dynamo-prefill-instance-id`) -> prefillWorkerId; `x-session-id` ->
 * session.id. A header and the nvext field it mirrors must agree when both
 * are given, and so must a header and its alias. A request naming no session
 * so may name one in a coding agent's own headers (`agent-sessions.ts`).
 *
 * Pins are checked against the model's configured workers: every pinned id
 * must be one of them, `backend_instance_id` and `decode_worker_id` (both
 * name the decode or aggregated worker) must agree, a pin must be inside
 * `allowed_worker_ids`, and `allowed_worker_ids` must name at least one of
 * them. Each contradiction is a 400 naming both fields.
 *
 * `nvext.routing_constraints` (Dynamo's `RoutingConstraints`): `required_taints` must all be carried by at least
 * one worker of the model, else the request is refused here (KVG_ERR_NO_TAINTED_WORKER) rather than queued for a
 * worker that does not exist; `preferred_taints` (taint -> cost factor) pass through to the scheduler.
 */
import type { IncomingHttpHeaders } from 'node:http';
import type { RouterConfigOverride, RoutingConstraints, RoutingHints } from '../common/index.js';
import { parseRouterConfigOverride } from '../core/index.js';
import { KvgateError, isKvgateError } from '../errors/index.js';
import { AGENT_SESSION_HEADERS, agentSession } from './agent-sessions.js';

/** Dynamo's query-only trigger: an annotation starting with exactly this. */
const QUERY_INSTANCE_ANNOTATION = 'query_instance_id:';

interface NvextBody {
  backend_instance_id?: number;
  prefill_worker_id?: number;
  decode_worker_id?: number;
  dp_rank?: number;
  prefill_dp_rank?: number;
  annotations?: string[];
  allowed_worker_ids?: number[];
  agent_hints?: { osl?: number; priority?: number; latency_sensitivity?: number };
  session_control?: { session_id: string; parent_session_id?: string; action?: 'open' | 'close'; timeout?: number };
  router_config_override?: Record<string, unknown>;
  routing_constraints?: { required_taints?: string[]; preferred_taints?: Record<string, number> };
  token_data?: number[];
  lora_name?: string;
}

export interface ParsedHints {
  hints: RoutingHints;
  queryOnly: boolean;
  /**
   * `nvext.token_data`: the prompt as token ids (GAIE stage 2). A completion's is its prompt (the engine is sent
   * it, nothing is tokenized); a chat's is checked against its messages (prompt-task.ts says why).
   */
  tokenData: Uint32Array | undefined;
}

function invalid(param: string, message: string): KvgateError {
  return new KvgateError('KVG_ERR_INVALID_REQUEST', `${param} ${message}`, { param });
}

function headerValue(headers: IncomingHttpHeaders, name: string): { name: string; value: string } | undefined {
  const v = headers[name];
  if (v === undefined) return undefined;
  if (Array.isArray(v)) throw invalid(name, 'must be given once');
  return { name, value: v.trim() };
}

/** A worker id from a header or its alias; when both are given they must agree. */
function idHeader(
  headers: IncomingHttpHeaders,
  names: readonly [string, string],
): { name: string; id: number } | undefined {
  let found: { name: string; id: number } | undefined;
  for (const name of names) {
    const h = headerValue(headers, name);
    if (h === undefined) continue;
    const id = /^\d{1,16}$/.test(h.value) ? Number(h.value) : Number.NaN;
    if (!Number.isSafeInteger(id))
      throw invalid(
        h.name,
        `must be a worker id (a non-negative integer), got ${JSON.stringify(h.value.slice(0, 40))}`,
      );
    if (found !== undefined && found.id !== id)
      throw invalid(name, `(${id}) contradicts the ${found.name} header (${found.id})`);
    found ??= { name, id };
  }
  return found;
}

function merge(
  fromBody: number | undefined,
  bodyParam: string,
  fromHeader: { name: string; id: number } | undefined,
): number | undefined {
  if (fromHeader === undefined) return fromBody;
  if (fromBody !== undefined && fromBody !== fromHeader.id) {
    throw invalid(bodyParam, `(${fromBody}) contradicts the ${fromHeader.name} header (${fromHeader.id})`);
  }
  return fromHeader.id;
}

/**
 * `nvext.router_config_override`, parsed once here with the core's parser into
 * the typed override the scheduler reads unchanged, less the two values that
 * would book the request's load below what it is: `track_prefill_tokens: false`
 * (its prefill tokens booked as none) and `assume_kv_reuse: true` (its prompt
 * blocks booked as shared). Honoured, they hid a client's load from the
 * overload thresholds and the queue that protect everyone else's requests;
 * dropped, the router config's value applies (the same, or the load in full).
 * @throws KvgateError KVG_ERR_INVALID_REQUEST naming the offending field.
 */
function parseOverride(raw: Record<string, unknown>): RouterConfigOverride {
  try {
    const o = parseRouterConfigOverride(raw);
    if (o.trackPrefillTokens !== false && o.assumeKvReuse !== true) return o;
    const { trackPrefillTokens, assumeKvReuse, ...rest } = o;
    return Object.freeze({
      ...rest,
      ...(trackPrefillTokens === true ? { trackPrefillTokens } : {}),
      ...(assumeKvReuse === false ? { assumeKvReuse } : {}),
    });
  } catch (err) {
    if (!isKvgateError(err)) throw err;
    const field = String(err.detail?.field ?? '');
    throw invalid(
      `nvext.router_config_override${field !== '' && field !== '(root)' ? `.${field}` : ''}`,
      String(err.detail?.reason ?? err.message),
    );
  }
}

/** What the pin and taint checks read of a configured worker. */
interface WorkerId {
  readonly id: number;
  readonly taints?: readonly string[] | undefined;
}

interface Pin {
  id: number | undefined;
  /** The field (or header) that set it, for error messages. */
  param: string;
}

/**
 * The pins against the model's workers: each a configured worker, the decode pins in agreement, every pin
 * inside `allowed_worker_ids`, and that list naming at least one worker.
 * @throws KvgateError KVG_ERR_UNKNOWN_WORKER for an unknown pin; KVG_ERR_INVALID_REQUEST for a contradiction.
 */
function checkPins(pins: readonly Pin[], allowed: readonly number[] | undefined, workers: readonly WorkerId[]): void {
  // Built only for a request that pins or restricts workers (most do neither).
  let knownIds: Set<number> | undefined;
  const known = (id: number): boolean => (knownIds ??= new Set(workers.map((w) => w.id))).has(id);
  for (const p of pins) {
    if (p.id !== undefined && !known(p.id)) {
      throw new KvgateError(
        'KVG_ERR_UNKNOWN_WORKER',
        `${p.param} names worker ${p.id}, which is not a worker of this model`,
        { param: p.param, workerId: p.id },
      );
    }
  }
  const [backend, decode] = pins;
  if (backend!.id !== undefined && decode!.id !== undefined && backend!.id !== decode!.id) {
    throw invalid(
      decode!.param,
      `(${decode!.id}) contradicts ${backend!.param} (${backend!.id}); both name the worker that decodes`,
    );
  }
  if (allowed === undefined) return;
  if (!allowed.some((id) => known(id))) {
    throw invalid(
      'nvext.allowed_worker_ids',
      allowed.length === 0 ? 'is empty; omit it to allow every worker' : 'names no worker of this model',
    );
  }
  for (const p of pins) {
    if (p.id !== undefined && !allowed.includes(p.id)) {
      throw invalid(p.param, `(${p.id}) is not in nvext.allowed_worker_ids; a pinned worker must be an allowed one`);
    }
  }
}

/**
 * `nvext.routing_constraints` as the scheduler takes it (schema-checked: taint names, factors > 0), undefined when
 * it constrains nothing.
 * @throws KvgateError KVG_ERR_NO_TAINTED_WORKER when no worker of the model carries every required taint.
 */
function routingConstraints(
  raw: NvextBody['routing_constraints'],
  workers: readonly WorkerId[],
): RoutingConstraints | undefined {
  if (raw === undefined) return undefined;
  const required = raw.required_taints !== undefined ? [...new Set(raw.required_taints)] : [];
  const preferred = raw.preferred_taints;
  const hasPreferred = preferred !== undefined && Object.keys(preferred).length > 0;
  if (required.length === 0 && !hasPreferred) return undefined;
  if (required.length > 0 && !workers.some((w) => required.every((t) => w.taints?.includes(t) === true))) {
    throw new KvgateError(
      'KVG_ERR_NO_TAINTED_WORKER',
      `no worker of this model carries every required taint (${required.join(', ')})`,
      { param: 'nvext.routing_constraints.required_taints', requiredTaints: required },
    );
  }
  return {
    ...(required.length > 0 ? { requiredTaints: required } : {}),
    ...(hasPreferred ? { preferredTaints: { ...preferred } } : {}),
  };
}

/**
 * Session lineage: the parent session named by `x-parent-session-id` (or Dynamo's
 * `x-dynamo-parent-session-id`) or `nvext.session_control.parent_session_id`; all given must agree.
 * A request that names only a parent joins the parent's session (it follows and slides its binding).
 */
function withParent(
  session: RoutingHints['session'],
  nvParent: string | undefined,
  headers: IncomingHttpHeaders,
): RoutingHints['session'] {
  let parent =
    nvParent !== undefined ? { name: 'nvext.session_control.parent_session_id', value: nvParent } : undefined;
  for (const name of ['x-parent-session-id', 'x-dynamo-parent-session-id']) {
    const h = headerValue(headers, name);
    if (h === undefined) continue;
    if (h.value === '' || h.value.length > 256) throw invalid(name, 'must be 1 to 256 characters');
    if (parent !== undefined && parent.value !== h.value) throw invalid(name, `contradicts ${parent.name}`);
    parent = h;
  }
  if (parent === undefined) return session;
  if (session === undefined) return { id: parent.value };
  return parent.value === session.id ? session : { ...session, parentId: parent.value };
}

/** The headers that carry hints (each read below). */
const ROUTING_HEADERS = [
  'x-worker-instance-id',
  'x-dynamo-worker-instance-id',
  'x-prefill-instance-id',
  'x-dynamo-prefill-instance-id',
  'x-session-id',
  'x-parent-session-id',
  'x-dynamo-parent-session-id',
  ...AGENT_SESSION_HEADERS,
];

/** The routing headers a request carries (for a body parsed on a preprocessing thread). */
export function routingHeadersOf(headers: IncomingHttpHeaders): IncomingHttpHeaders {
  const out: IncomingHttpHeaders = {};
  for (const h of ROUTING_HEADERS) if (headers[h] !== undefined) out[h] = headers[h];
  return out;
}

/** The hints of a request without `nvext` and without routing headers (read-only, shared). */
const NO_HINTS: ParsedHints = Object.freeze({
  hints: Object.freeze({
    backendInstanceId: undefined,
    prefillWorkerId: undefined,
    decodeWorkerId: undefined,
    dpRank: undefined,
    prefillDpRank: undefined,
    allowedWorkerIds: undefined,
    session: undefined,
    priorityJump: undefined,
    expectedOutputTokens: undefined,
    loraName: undefined,
    routerConfigOverride: undefined,
    routingConstraints: undefined,
    annotations: Object.freeze([]) as readonly string[],
  }),
  queryOnly: false,
  tokenData: undefined,
});

/**
 * With the model's `client_pins: deny`, a request that names its workers (a pin or `allowed_worker_ids`, which skip
 * the router queue, and pinned the overload thresholds, that share the workers among every client) is refused.
 * @throws KvgateError KVG_ERR_INVALID_REQUEST naming the first such field or header.
 */
function refusePins(pins: readonly Pin[], allowed: readonly number[] | undefined): void {
  const named =
    pins.find((p) => p.id !== undefined)?.param ?? (allowed !== undefined ? 'nvext.allowed_worker_ids' : '');
  if (named !== '')
    throw invalid(named, "names a worker, which this model's clients may not (client_pins: deny); omit it");
}

/**
 * Routing hints of a request for a model with `workers`; `clientPins` is the model's `client_pins`.
 * @throws KvgateError KVG_ERR_INVALID_REQUEST naming the header or nvext field; KVG_ERR_UNKNOWN_WORKER for a pin that
 *   is not one of `workers`.
 */
export function parseRoutingHints(
  nvextRaw: unknown,
  headers: IncomingHttpHeaders,
  workers: readonly WorkerId[],
  clientPins: 'allow' | 'deny' = 'allow',
): ParsedHints {
  // Most requests carry no hint at all: one shared answer, the same as the full path's for them.
  if (nvextRaw === undefined && !ROUTING_HEADERS.some((h) => headers[h] !== undefined)) return NO_HINTS;
  const nv = (nvextRaw ?? {}) as NvextBody;
  const backendHeader = idHeader(headers, ['x-worker-instance-id', 'x-dynamo-worker-instance-id']);
  const backendInstanceId = merge(nv.backend_instance_id, 'nvext.backend_instance_id', backendHeader);
  const prefillHeader = idHeader(headers, ['x-prefill-instance-id', 'x-dynamo-prefill-instance-id']);
  const prefillWorkerId = merge(nv.prefill_worker_id, 'nvext.prefill_worker_id', prefillHeader);
  const pins: Pin[] = [
    { id: backendInstanceId, param: backendHeader?.name ?? 'nvext.backend_instance_id' },
    { id: nv.decode_worker_id, param: 'nvext.decode_worker_id' },
    { id: prefillWorkerId, param: prefillHeader?.name ?? 'nvext.prefill_worker_id' },
  ];
  if (clientPins === 'deny') refusePins(pins, nv.allowed_worker_ids);
  checkPins(pins, nv.allowed_worker_ids, workers);

  let session: RoutingHints['session'];
  const sessionHeader = headerValue(headers, 'x-session-id');
  if (sessionHeader !== undefined && (sessionHeader.value === '' || sessionHeader.value.length > 256)) {
    throw invalid('x-session-id', 'must be 1 to 256 characters');
  }
  if (nv.session_control !== undefined) {
    if (sessionHeader !== undefined && sessionHeader.value !== nv.session_control.session_id) {
      throw invalid('nvext.session_control.session_id', 'contradicts the x-session-id header');
    }
    session = {
      id: nv.session_control.session_id,
      action: nv.session_control.action,
      timeoutSecs: nv.session_control.timeout,
    };
  } else if (sessionHeader !== undefined) {
    session = { id: sessionHeader.value };
  } else {
    session = agentSession(headers);
  }
  session = withParent(session, nv.session_control?.parent_session_id, headers);

  const routerConfigOverride =
    nv.router_config_override === undefined ? undefined : parseOverride(nv.router_config_override);

  const hints = nv.agent_hints;
  const priority = hints?.priority ?? hints?.latency_sensitivity;
  const annotations = nv.annotations ?? [];
  return {
    hints: {
      backendInstanceId,
      prefillWorkerId,
      decodeWorkerId: nv.decode_worker_id,
      dpRank: nv.dp_rank,
      prefillDpRank: nv.prefill_dp_rank,
      allowedWorkerIds: nv.allowed_worker_ids !== undefined ? new Set(nv.allowed_worker_ids) : undefined,
      session,
      priorityJump: priority !== undefined ? Math.max(0, priority) : undefined,
      expectedOutputTokens: hints?.osl,
      loraName: nv.lora_name,
      routerConfigOverride,
      routingConstraints: routingConstraints(nv.routing_constraints, workers),
      annotations,
    },
    queryOnly: annotations.some((a) => a.startsWith(QUERY_INSTANCE_ANNOTATION)),
    tokenData: nv.token_data !== undefined ? Uint32Array.from(nv.token_data) : undefined,
  };
}
