/**
 * The engine request of one leg on its chosen worker, built once per attempt:
 * the dp rank's and the handoff's fields laid over the body, every generating
 * leg streamed with usage (with the token ids a migration resumes from when
 * asked and the engine sends them), the trace context's headers and the
 * client's request id, and the leg's progress deadlines. Pure: the
 * PushRouter sends what this builds.
 */
import { NO_LEG_FIELDS, dpRankLegFields, mergeLegFields, streamingBodyFields } from '../../engines/index.js';
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
 * The dispatch options of `req` on `sel`'s worker. `tokenIds`: the leg asks for the token ids a migration resumes
 * from; `traceHeaders`: the engine leg's span context. The first-byte deadline covers streamed legs and one-token
 * prefills, the idle deadline streamed legs only.
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
  // Every generating leg streams with usage; a one-token leg that turns streaming off (a P/D prefill) stays
  // unstreamed, and a pooling leg (embeddings) generates nothing: sent as the client sent it.
  const streamed = extra.fields['stream'] !== false && !isPoolingPath(req.path);
  // vLLM (>= 0.10.2) sends the token ids a migration resumes from (others when configured so); else retried before
  // the first byte only.
  const ids = tokenIds && (w.returnsTokenIds ?? w.dialect === 'vllm');
  // One options object of one shape per dispatch (undefined: not set), fields and headers each built once.
  return {
    signal: req.signal,
    stream: streamed,
    extraFields: streamed ? streamingFields(extra.fields, req.body, ids) : extra.fields,
    headers: legHeaders(extra.headers, traceHeaders, req.clientRequestId ?? req.requestId),
    firstByteTimeoutMs: streamed || req.phase === 'prefill' ? timeouts?.firstByteMs : undefined,
    streamIdleTimeoutMs: streamed ? timeouts?.streamIdleMs : undefined,
    onDispatched: req.onDispatched,
  };
}
