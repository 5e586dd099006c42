/**
 * What routing does differently for the APIs coding agents speak (Anthropic Messages, OpenAI Responses). Their
 * requests are routed on the tokens of the chat request the engine runs them as (the frontend computes them) and
 * forwarded to the engine's own endpoint, booked and guarded as a chat completion is. Differences:
 *
 * - A non-streaming request streams from the engine as a chat completion's does, and its answer is assembled from
 *   the events (push/assembled-answer.ts). An unstreamed answer's first byte comes only when its generation is
 *   done, so no progress deadline could bound it; streamed, an engine that hangs on it is cut by `engine_timeouts`
 *   with the chat's error, retried elsewhere and counted against the worker as a chat's leg is.
 * - A stream is never migrated after its first event: a continuation is a token-id completion whose chunks are
 *   rewritten into the original OpenAI stream's shape, which these event sequences are not. Before the first
 *   event a failed attempt is retried on another worker as any request is (a leg that failed after its headers
 *   is sent again as it is: push/migration.ts).
 * - Disaggregated serving is refused: the prefill leg's one-token request and the decode leg's handoff fields
 *   are written for the OpenAI endpoints.
 */
import { KvgateError } from '../errors/index.js';
import type { EndpointKind } from './router-port.js';

export function isAgentEndpoint(endpoint: EndpointKind): endpoint is 'messages' | 'responses' {
  return endpoint === 'messages' || endpoint === 'responses';
}

/** KVG_ERR_AGENT_API_NOT_DISAGGREGATED: the model runs disaggregated, which these endpoints are not served by. */
export function agentDisaggRefusal(model: string, endpoint: 'messages' | 'responses'): KvgateError {
  const path = endpoint === 'messages' ? '/v1/messages' : '/v1/responses';
  return new KvgateError(
    'KVG_ERR_AGENT_API_NOT_DISAGGREGATED',
    `model ${model} runs disaggregated (prefill and decode workers); kvgate serves ${path} only on models served ` +
      'aggregated: use /v1/chat/completions for this model',
    { param: 'model', model },
  );
}
