/**
 * The preprocessing task of an agent-API request (Anthropic Messages, OpenAI Responses): its body converted
 * to the chat request the engine's own front end runs it as (messages-convert.ts, responses-convert.ts), then
 * the same chat task a chat completion gets, so it is rendered and tokenized as the engine does.
 */
import type { ChatConversion, Json } from './agent-convert.js';
import { messagesToChat } from './messages-convert.js';
import type { ChatTask } from './preprocess/protocol.js';
import { responsesToChat } from './responses-convert.js';

export type AgentApi = 'messages' | 'responses';

export interface AgentTaskInputs {
  readonly api: AgentApi;
  readonly body: Json;
  readonly model: string;
  readonly maxPromptTokens: number;
  readonly loraName: string | undefined;
}

/** The body as a chat request (the conversion's errors are thrown: see `messagesToChat`, `responsesToChat`). */
export function agentChat(api: AgentApi, body: Json): ChatConversion {
  return api === 'messages' ? messagesToChat(body) : responsesToChat(body);
}

/** The chat task an agent-API request is routed by. */
export function agentChatTask(inp: AgentTaskInputs): ChatTask {
  const chat = agentChat(inp.api, inp.body);
  return {
    kind: 'chat',
    model: inp.model,
    maxPromptTokens: inp.maxPromptTokens,
    loraName: inp.loraName,
    cacheSalt: typeof inp.body.cache_salt === 'string' ? inp.body.cache_salt : undefined,
    addSpecialTokens: undefined,
    messages: chat.messages,
    tools: chat.tools,
    chatTemplateKwargs: chat.chatTemplateKwargs,
    addGenerationPrompt: chat.continueFinalMessage ? false : undefined,
    continueFinalMessage: chat.continueFinalMessage ? true : undefined,
    tokenData: undefined,
  };
}
