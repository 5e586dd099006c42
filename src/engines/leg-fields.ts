/**
 * What a dialect adds to a client's request for one leg (`LegFields`): top-level
 * body fields (laid over the client's body by `dispatch`'s `extraFields`; an
 * `undefined` value removes the key) and request headers. They are plain data
 * built by pure functions, so the router composes them (data-parallel rank +
 * P/D handoff) and tests compare them exactly. The leg itself, the request one
 * engine is sent, is routing's `LegRequest`, which carries these as `legFields`.
 */
import type { EngineDialect } from '../common/index.js';
import { KvgateError } from '../errors/index.js';

export interface LegFields {
  readonly fields: Readonly<Record<string, unknown>>;
  readonly headers: Readonly<Record<string, string>>;
}

export const NO_LEG_FIELDS: LegFields = Object.freeze({ fields: Object.freeze({}), headers: Object.freeze({}) });

/** Header both vLLM (`X-data-parallel-rank`, case-insensitive) and recent SGLang read to pin a request to a DP rank. */
export const DP_RANK_HEADER = 'x-data-parallel-rank';

/** Combines leg fields; a later one's field or header wins over an earlier one's. */
export function mergeLegFields(...legs: LegFields[]): LegFields {
  // Leg fields are read-only: with at most one that is not empty, it is the merge (no copy).
  const nonEmpty = legs.filter((l) => l !== NO_LEG_FIELDS);
  if (nonEmpty.length <= 1) return nonEmpty[0] ?? NO_LEG_FIELDS;
  const fields: Record<string, unknown> = {};
  const headers: Record<string, string> = {};
  for (const leg of nonEmpty) {
    Object.assign(fields, leg.fields);
    Object.assign(headers, leg.headers);
  }
  return { fields, headers };
}

/**
 * Pins a request to a data-parallel rank of one engine endpoint.
 * vLLM reads only the header; SGLang reads the header (newer builds) and the
 * `routed_dp_rank` body field (builds since the field replaced `data_parallel_rank`).
 * @throws KvgateError KVG_ERR_INVALID_ARGUMENT when the rank is not a non-negative integer.
 */
export function dpRankLegFields(dialect: EngineDialect, dpRank: number): LegFields {
  checkRank(dpRank, 'dpRank');
  const headers = { [DP_RANK_HEADER]: String(dpRank) };
  return dialect === 'sglang' ? { fields: { routed_dp_rank: dpRank }, headers } : { fields: {}, headers };
}

export function checkRank(value: number, name: string): void {
  if (!Number.isSafeInteger(value) || value < 0) {
    throw new KvgateError('KVG_ERR_INVALID_ARGUMENT', `${name} must be a non-negative integer, got ${String(value)}`, {
      [name]: value,
    });
  }
}

/**
 * Fields that turn a client's completion or chat body into a one-token, non-streaming prefill:
 * `max_tokens: 1` (and `max_completion_tokens: 1` when the client used it), `stream: false`,
 * and the stream-only or length-floor fields removed (`stream_options` is rejected without
 * `stream`, `min_tokens` > 1 contradicts `max_tokens: 1`).
 */
export function oneTokenPrefillFields(body: Readonly<Record<string, unknown>>): Record<string, unknown> {
  const fields: Record<string, unknown> = { stream: false, max_tokens: 1 };
  if ('max_completion_tokens' in body) fields['max_completion_tokens'] = 1;
  for (const key of ['stream_options', 'min_tokens', 'min_completion_tokens']) {
    if (key in body) fields[key] = undefined;
  }
  return fields;
}

/**
 * Fields that make a generating leg stream with a usage chunk. A leg of more
 * than one token streams, whatever the client asked for: the router sees the
 * first token when it is generated (the prompt's load leaves the worker then,
 * TTFT is real, and the stream-idle deadline bounds a stalled engine), and the
 * usage chunk carries the engine's cached-token count. A client that asked for
 * `stream: false` gets the answer assembled from the chunks
 * (`ResponseAssembler`); the client's other `stream_options` are kept. A leg
 * that `answersInOneToken` is sent as the client asked instead.
 */
export function streamingBodyFields(body: Readonly<Record<string, unknown>>): Record<string, unknown> {
  const so = body['stream_options'];
  const own = typeof so === 'object' && so !== null && !Array.isArray(so) ? so : {};
  return { stream: true, stream_options: { ...own, include_usage: true } };
}

/** Whether a streaming client asked for the final usage chunk itself (`stream_options.include_usage`). */
export function clientWantsUsage(body: Readonly<Record<string, unknown>>): boolean {
  const so = body['stream_options'];
  return typeof so === 'object' && so !== null && (so as Record<string, unknown>)['include_usage'] === true;
}

function isCount(v: unknown): v is number {
  return typeof v === 'number' && Number.isFinite(v);
}

/**
 * Whether a completion or chat body asks for at most one generated token per choice: `max_completion_tokens` when
 * it is a number (chat), else `max_tokens`, is at most 1 (engines refuse less than 1 themselves). Such an answer's
 * first token is its last: the engine's JSON answer arrives when its first token would have, so a non-streaming
 * leg tells the router as much as a stream would (the prompt done, TTFT), with no gap for an idle deadline to bound.
 */
export function answersInOneToken(body: Readonly<Record<string, unknown>>): boolean {
  const mct = body['max_completion_tokens'];
  const limit = isCount(mct) ? mct : body['max_tokens'];
  return isCount(limit) && limit <= 1;
}
