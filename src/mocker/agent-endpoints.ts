/**
 * The simulated engine's agent endpoints (`POST /v1/messages`, `POST /v1/responses`), built as vLLM builds its
 * own: the body is converted to a chat request (common's `agentChat`, vLLM's rules), generated as a chat
 * completion, and answered in the API's shape (messages-writer.ts, responses-writer.ts).
 */
import type { ServerResponse } from 'node:http';
import { agentChat, type AgentApi, type InlineSystemMode } from '../common/index.js';
import { KvgateError } from '../errors/index.js';
import type { AgentWriter, AnswerFaults } from './agent-writer.js';
import { MessagesWriter } from './messages-writer.js';
import type { GenerateRequest, ResponseMeta } from './openai-protocol.js';
import { ResponsesWriter } from './responses-writer.js';

export function isAgentKind(kind: string): kind is AgentApi {
  return kind === 'messages' || kind === 'responses';
}

function obj(v: unknown): Record<string, unknown> | undefined {
  return typeof v === 'object' && v !== null && !Array.isArray(v) ? (v as Record<string, unknown>) : undefined;
}

/** Anthropic's `tool_choice` as chat's (vLLM's mapping); undefined when absent. */
function messagesToolChoice(choice: unknown): unknown {
  const c = obj(choice);
  if (c === undefined) return undefined;
  if (c['type'] === 'any') return 'required';
  if (c['type'] === 'tool') return { type: 'function', function: { name: c['name'] } };
  return c['type'];
}

/** Responses' `tool_choice` as chat's: a named function is flat in Responses. */
function responsesToolChoice(choice: unknown): unknown {
  const c = obj(choice);
  return c !== undefined && c['type'] === 'function' ? { type: 'function', function: { name: c['name'] } } : choice;
}

/**
 * The chat body an agent request runs as: the converted messages and tools, and the fields generation reads;
 * `source`, the body's UTF-8 JSON, gives a tool_use input's number literals as vLLM writes them (common's `agentChat`),
 * and the tools' (`toolsJson`: the conversion's, which the chat body's JSON no longer holds).
 * @throws KvgateError the conversion's (common's `agentChat`), answered as the engine's 400.
 */
export function agentChatBody(
  api: AgentApi,
  body: unknown,
  inlineSystem: InlineSystemMode,
  source?: Uint8Array,
): { body: Record<string, unknown>; toolsJson: string | undefined } {
  const b = obj(body);
  if (b === undefined)
    throw new KvgateError('KVG_ERR_INVALID_REQUEST', 'the body must be a JSON object', { param: null });
  const chat = agentChat(api, b, inlineSystem, source);
  const out: Record<string, unknown> = {
    model: b['model'],
    messages: chat.messages,
    stream: b['stream'] === true,
    max_tokens: api === 'messages' ? b['max_tokens'] : (b['max_output_tokens'] ?? undefined),
    tool_choice: api === 'messages' ? messagesToolChoice(b['tool_choice']) : responsesToolChoice(b['tool_choice']),
  };
  if (chat.tools !== undefined) out['tools'] = chat.tools;
  if (chat.chatTemplateKwargs !== undefined) out['chat_template_kwargs'] = chat.chatTemplateKwargs;
  for (const key of ['seed', 'temperature', 'top_p']) if (b[key] !== undefined) out[key] = b[key];
  // As vLLM: its Responses request takes a cache salt (its blocks hashed under it); its Messages request has none.
  if (api === 'responses' && b['cache_salt'] !== undefined) out['cache_salt'] = b['cache_salt'];
  // As vLLM: its Responses request takes a scheduling `priority`; its Messages request has none (an unknown field).
  if (api === 'responses' && b['priority'] !== undefined) out['priority'] = b['priority'];
  return { body: out, toolsJson: chat.toolsJson };
}

/** The writer of an agent API's answer. */
export function agentAnswerWriter(
  api: AgentApi,
  res: ServerResponse,
  p: GenerateRequest,
  meta: ResponseMeta,
  promptTokens: number,
  maxTokens: number,
  faults: AnswerFaults,
): AgentWriter {
  return api === 'messages'
    ? new MessagesWriter(res, p, meta, promptTokens, maxTokens, faults)
    : new ResponsesWriter(res, p, meta, promptTokens, maxTokens, faults);
}
