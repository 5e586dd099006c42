/**
 * What routing does differently for the APIs coding agents speak (Anthropic Messages, OpenAI Responses). Their
 * requests are routed on the tokens of the chat request the engine runs them as (the frontend computes them) and
 * forwarded to the engine's own endpoint, booked and guarded as a chat completion is. Differences:
 *
 * - A non-streaming request is sent unstreamed: the engine's answer is the client's, as the engine wrote it
 *   (kvgate assembles only OpenAI chat and completion streams).
 * - A stream is never migrated after its first event: a continuation is a token-id completion whose chunks are
 *   rewritten into the original OpenAI stream's shape, which these event sequences are not. Before the first
 *   event a failed attempt is retried on another worker as any request is (a leg that failed after its headers
 *   is sent again as it is: push/migration.ts).
 * - Disaggregated serving is refused: the prefill leg's one-token request and the decode leg's handoff fields
 *   are written for the OpenAI endpoints.
 */
import { KvgateError } from '../errors/index.js';
import type { LegRequest } from './push/types.js';
import type { EndpointKind, PreparedRequest } from './router-port.js';

export function isAgentEndpoint(endpoint: EndpointKind): endpoint is 'messages' | 'responses' {
  return endpoint === 'messages' || endpoint === 'responses';
}

const UNSTREAMED: Pick<LegRequest, 'legFields'> = Object.freeze({
  legFields: Object.freeze({ fields: Object.freeze({ stream: false }), headers: Object.freeze({}) }),
});
const NONE: Pick<LegRequest, 'legFields'> = Object.freeze({});

/** The leg fields of an agent-API request: a non-streaming one is sent unstreamed (module comment). */
export function agentLegFields(req: PreparedRequest): Pick<LegRequest, 'legFields'> {
  return isAgentEndpoint(req.endpoint) && !req.stream ? UNSTREAMED : NONE;
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
