/**
 * The preprocessing task of an agent-API request (Anthropic Messages, OpenAI Responses): its body converted
 * to the chat request the engine's own front end runs it as (common's `agentChat`), then the same chat task a
 * chat completion gets, so it is rendered and tokenized as the engine does.
 */
import { agentChat, type AgentApi, type InlineSystemMode } from '../common/index.js';
import { KvgateError } from '../errors/index.js';
import type { ChatTask } from './preprocess/protocol.js';
import { validateBody } from './schemas.js';

export type { AgentApi };

export interface AgentTaskInputs {
  readonly api: AgentApi;
  readonly body: Record<string, unknown>;
  readonly model: string;
  readonly maxPromptTokens: number;
  readonly loraName: string | undefined;
  /** The task's `returnTokenIds` (default true). */
  readonly returnTokenIds?: boolean | undefined;
  /** Where a Messages body's inline system messages go (the model's `anthropic_inline_system`; default `preserve`). */
  readonly inlineSystem?: InlineSystemMode | undefined;
  /** The body's UTF-8 JSON, where a Messages tool_use input's number literals are read (common's `agentChat`). */
  readonly source?: Uint8Array | undefined;
}

/** The chat task an agent-API request is routed by (the conversion's errors are thrown: common's `agentChat`). */
export function agentChatTask(inp: AgentTaskInputs): ChatTask {
  const chat = agentChat(inp.api, inp.body, inp.inlineSystem, inp.source);
  return {
    kind: 'chat',
    model: inp.model,
    maxPromptTokens: inp.maxPromptTokens,
    loraName: inp.loraName,
    // vLLM's Responses request takes a cache salt; its Messages request has none and its engine hashes the blocks
    // unsalted, so a salt on Messages would make every turn look cold to routing.
    cacheSalt: inp.api === 'responses' && typeof inp.body.cache_salt === 'string' ? inp.body.cache_salt : undefined,
    addSpecialTokens: undefined,
    messages: chat.messages,
    tools: chat.tools,
    toolsJson: chat.toolsJson,
    chatTemplateKwargs: chat.chatTemplateKwargs,
    addGenerationPrompt: chat.continueFinalMessage ? false : undefined,
    continueFinalMessage: chat.continueFinalMessage ? true : undefined,
    tokenData: undefined,
    returnTokenIds: inp.returnTokenIds,
  };
}

/**
 * The chat messages a Messages body's `messages` become, at most: one per message, and one per `tool_result`
 * block of it (each is a tool message of its own), so that one message of many results is bounded as many
 * messages are. Counted on the raw list, before the conversion walks it.
 */
function chatMessagesOf(messages: readonly unknown[]): number {
  let n = messages.length;
  for (const m of messages) {
    const content = (m as { content?: unknown } | null)?.content;
    if (!Array.isArray(content)) continue;
    for (const block of content) if ((block as { type?: unknown } | null)?.type === 'tool_result') n++;
  }
  return n;
}

/**
 * The checks an agent-API body gets before its model is looked up: the conversation is within
 * `limits.max_messages` (Messages' `messages`, Responses' `input` items), then what it shares with a chat's body
 * (`validateBody`'s `agent` schema: `model`, `stream`, `cache_salt`, `nvext`, at most 1,024 top-level members),
 * which routing reads before any conversion: an `nvext` of the wrong shape is a 400 naming its field, never work
 * sized by what it claims. The rest is checked as the body is converted.
 * @throws KvgateError KVG_ERR_INVALID_REQUEST, KVG_ERR_TOO_MANY_MESSAGES.
 */
export function checkAgentBody(
  api: AgentApi,
  body: Record<string, unknown>,
  limits: { readonly maxMessages: number },
): void {
  const field = api === 'messages' ? 'messages' : 'input';
  const list = body[field];
  const entries = Array.isArray(list) ? (api === 'messages' ? chatMessagesOf(list) : list.length) : 0;
  if (entries > limits.maxMessages) {
    throw new KvgateError(
      'KVG_ERR_TOO_MANY_MESSAGES',
      `${field} holds ${entries} entries as chat messages; kvgate accepts at most ${limits.maxMessages} per request`,
      { param: field, messages: entries, maxMessages: limits.maxMessages },
    );
  }
  validateBody('agent', body, limits);
}
