/**
 * The APIs coding agents speak, as chat: an Anthropic Messages or OpenAI Responses body converted to the chat
 * request the engine's own front end (vLLM's) runs it as. The gateway routes on that chat request's tokens; the
 * simulated engine generates from it. The rules are in messages-convert.ts and responses-convert.ts.
 */
import type { ChatConversion, Json } from './agent-convert.js';
import type { InlineSystemMode } from './inline-system.js';
import { messagesToChat } from './messages-convert.js';
import { responsesToChat } from './responses-convert.js';

/** Anthropic's Messages API (`/v1/messages`) or OpenAI's Responses API (`/v1/responses`). */
export type AgentApi = 'messages' | 'responses';

/**
 * The body as the chat request it runs as; `inlineSystem` places a Messages body's system messages inside
 * `messages` (inline-system.ts), as the engine's `anthropic_inline_system` does; `source`, the body's JSON (UTF-8
 * bytes) where there is one, gives a Messages tool_use input's number literals (`messagesToChat`) and the tools'.
 * @throws KvgateError KVG_ERR_INVALID_REQUEST, KVG_ERR_INVALID_CONTENT_BLOCK, KVG_ERR_UNSUPPORTED_CONTENT,
 *   KVG_ERR_PREVIOUS_RESPONSE_UNSUPPORTED, KVG_ERR_BACKGROUND_UNSUPPORTED (see `messagesToChat`, `responsesToChat`);
 *   `detail.param` names the field.
 */
export function agentChat(
  api: AgentApi,
  body: Json,
  inlineSystem: InlineSystemMode = 'preserve',
  source?: Uint8Array,
): ChatConversion {
  return api === 'messages' ? messagesToChat(body, inlineSystem, source) : responsesToChat(body, source);
}
