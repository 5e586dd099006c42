/**
 * The engine request of one leg on its chosen worker, built once per attempt:
 * the dp rank's and the handoff's fields laid over the body, a generating leg
 * of more than one token streamed with usage (with the token ids a migration resumes from when
 * asked and the engine sends them), the trace context's headers and the
 * client's request id, and the leg's progress deadlines. Pure: the
 * PushRouter sends what this builds.
 */
import {
  NO_LEG_FIELDS,
  answersInOneToken,
  dpRankLegFields,
  mergeLegFields,
  streamingBodyFields,
} from '../../engines/index.js';
import type { DispatchOptions } from '../../engines/index.js';
import { isPoolingPath } from '../embeddings.js';
import type { LegRequest, Selection } from './types.js';

/** Progress deadlines per leg (ms; 0 or undefined: none). See `PushRouterOptions.legTimeouts`. */
export interface LegTimeouts {
  readonly firstByteMs?: number | undefined;
  readonly streamIdleMs?: number | undefined;
}

/** A streamed leg's body fields: the leg's, streaming with usage, and the token ids a migration resumes from. */
function streamingFields(
  fields: Readonly<Record<string, unknown>>,
  body: Readonly<Record<string, unknown>>,
  ids: boolean,
): Record<string, unknown> {
  const out: Record<string, unknown> = Object.assign({}, fields, streamingBodyFields(body));
  if (ids) out['return_token_ids'] = true;
  return out;
}

/**
 * A leg sent unstreamed that generates one token: a P/D prefill, a leg its fields cut to one unstreamed token (the
 * decode leg of a P/D client that already left), or a client's one-token request (`legStreams`).
 */
function oneTokenLeg(req: LegRequest, fields: Readonly<Record<string, unknown>>): boolean {
  if (req.phase === 'prefill' || (fields['stream'] === false && fields['max_tokens'] === 1)) return true;
  return req.phase === 'aggregated' && !req.stream && answersInOneToken(req.body);
}

/**
 * Whether the first-byte deadline bounds the leg: a streamed one (its first event), one that answers in one token,
 * and a pooling leg (embeddings), whose answer comes when its prompt's forward pass is done, as a first token would.
 */
function firstByteBound(req: LegRequest, fields: Readonly<Record<string, unknown>>, streamed: boolean): boolean {
  return streamed || oneTokenLeg(req, fields) || isPoolingPath(req.path);
}

/** A leg's headers, its trace context's, and the client's request id (which engines build the response's `id` from). */
function legHeaders(
  leg: Readonly<Record<string, string>>,
  trace: Readonly<Record<string, string>>,
  requestId: string,
): Record<string, string> {
  const out: Record<string, string> = Object.assign({}, leg, trace);
  out['x-request-id'] = requestId;
  return out;
}

/**
 * Whether a leg goes to the engine streamed. Every generating leg streams with usage (the guard sees the first token
 * when it is generated, the idle deadline bounds a stalled engine, a migration resumes from the tokens so far), with
 * three exceptions sent as they are: a leg whose fields turn streaming off (a P/D prefill), a pooling leg (embeddings
 * generate nothing), and an aggregated leg of a client that asked for no stream and at most one token
 * (`answersInOneToken`). That last one's first token is its last, so the engine's
 * JSON answer comes when its first chunk would have: the guard marks the prompt done and observes TTFT on it as a
 * stream would, and kvgate relays the engine's own answer instead of parsing chunks and assembling one. A failure
 * before that answer reached kvgate has reached no client, so it is retried elsewhere as any failed attempt is.
 * Longer non-streaming requests stay streamed, an agent API's too: their prompt's load must leave the worker at the
 * first token, not the last, their TTFT is not their end-to-end time, and an answer whose first byte comes at its
 * end could be bounded by no progress deadline. A decode leg keeps its stream (its handoff, its token ids).
 */
function legStreams(req: LegRequest, fields: Readonly<Record<string, unknown>>): boolean {
  if (fields['stream'] === false || isPoolingPath(req.path)) return false;
  return req.stream || req.phase !== 'aggregated' || !answersInOneToken(req.body);
}

/**
 * The dispatch options of `req` on `sel`'s worker. `tokenIds`: the leg asks for the token ids a migration resumes
 * from; `traceHeaders`: the engine leg's span context. The first-byte deadline covers every leg that streams or
 * answers once its prompt is done (`firstByteBound`), the idle deadline streamed legs only.
 */
export function legDispatchOptions(
  req: LegRequest,
  sel: Selection,
  tokenIds: boolean,
  traceHeaders: Readonly<Record<string, string>>,
  timeouts: LegTimeouts | undefined,
): DispatchOptions {
  const w = sel.worker;
  const rankFields = w.dpSize > 1 || w.dpStart > 0 ? dpRankLegFields(w.dialect, sel.slot.dpRank) : NO_LEG_FIELDS;
  const extra = mergeLegFields(rankFields, req.legFields ?? NO_LEG_FIELDS);
  const streamed = legStreams(req, extra.fields);
  // vLLM (>= 0.10.2) sends the token ids a migration resumes from (others when configured so); else retried before
  // the first byte only.
  const ids = tokenIds && (w.returnsTokenIds ?? w.dialect === 'vllm');
  // One options object of one shape per dispatch (undefined: not set), fields and headers each built once.
  return {
    signal: req.signal,
    stream: streamed,
    extraFields: streamed ? streamingFields(extra.fields, req.body, ids) : extra.fields,
    headers: legHeaders(extra.headers, traceHeaders, req.clientRequestId ?? req.requestId),
    firstByteTimeoutMs: firstByteBound(req, extra.fields, streamed) ? timeouts?.firstByteMs : undefined,
    streamIdleTimeoutMs: streamed ? timeouts?.streamIdleMs : undefined,
    onDispatched: req.onDispatched,
  };
}
