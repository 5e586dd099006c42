/**
 * An OpenAI Responses request (`POST /v1/responses`) → the chat messages and tools vLLM's Responses front end
 * runs it as (its `construct_input_messages`, non-Harmony models), checked on the way:
 *
 * - `instructions` (non-empty) → a leading system message; `input` as a string → one user message.
 * - `input` items, left to right: a `message` of role user / system / developer passes through (its
 *   `input_text` / `output_text` parts read as text parts); an assistant `message` → an assistant message of its
 *   first part's text (filling the previous assistant message when that one has no content yet);
 *   `function_call` → a tool call, added to the previous assistant message when there is one;
 *   `function_call_output` → a `tool` message; `reasoning` → the reasoning of the previous assistant message
 *   (or a new one); its `encrypted_content` cannot be read and is refused.
 * - Tools are flat in Responses; vLLM wraps each whole tool object, whatever its type, as a chat tool's `function`.
 * - A last item that is an unfinished assistant message or reasoning (`status` in_progress / incomplete) is
 *   continued: rendered open-ended, without a generation prompt.
 *
 * `reasoning.effort` reaches the template as a chat completion's `reasoning_effort` does, with the request's
 * `chat_template_kwargs` (vLLM's `ResponsesRequest.build_chat_params`, the rule in template-kwargs.ts).
 *
 * `previous_response_id` and `background: true` are refused: kvgate keeps no responses, and an engine's store is per
 * process.
 */
import { KvgateError } from '../errors/index.js';
import {
  type ChatConversion,
  type Json,
  invalidBlock,
  invalidField,
  isObject,
  requireString,
  unsupportedBlock,
} from './agent-convert.js';
import { pythonToolsJson } from './python-json.js';
import { chatTemplateKwargsOf } from './template-kwargs.js';

const MESSAGE_ROLES = new Set(['user', 'system', 'developer', 'assistant']);

/** A message item's content as the chat parser reads it: a string, or text parts. */
function messageContent(content: unknown, param: string): string | Json[] {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) throw invalidBlock(param, 'must be a string or a list of content parts');
  return content.map((part, i) => {
    const p = `${param}[${i}]`;
    if (!isObject(part) || typeof part.type !== 'string') throw invalidBlock(p, 'must be an object with a type');
    if (part.type === 'input_text' || part.type === 'output_text' || part.type === 'text') {
      return { type: 'text', text: requireString(part.text, `${p}.text`) };
    }
    if (part.type === 'input_image' || part.type === 'input_file' || part.type === 'input_audio') {
      throw unsupportedBlock(`${p}.type`, part.type);
    }
    throw invalidBlock(`${p}.type`, `is ${JSON.stringify(part.type)}; not a Responses API content part type`);
  });
}

function lastAssistant(out: Json[]): Json | undefined {
  const last = out.at(-1);
  return last?.role === 'assistant' ? last : undefined;
}

function assistantItem(item: Json, param: string, out: Json[]): void {
  const content = messageContent(item.content, `${param}.content`);
  const first = typeof content === 'string' ? content : content[0]?.text;
  const text = typeof first === 'string' ? first : '';
  const prev = lastAssistant(out);
  if (prev !== undefined && prev.content === undefined) prev.content = text;
  else out.push({ role: 'assistant', content: text });
}

function reasoningItem(item: Json, param: string, out: Json[]): void {
  if (item.encrypted_content !== undefined && item.encrypted_content !== null) {
    throw invalidBlock(`${param}.encrypted_content`, 'cannot be read by the engine; send the reasoning text');
  }
  const firstText = (list: unknown, p: string): string | undefined => {
    if (list === undefined || list === null) return undefined;
    if (!Array.isArray(list)) throw invalidBlock(p, 'must be a list');
    if (list.length === 0) return undefined;
    const head = list[0] as unknown;
    if (!isObject(head)) throw invalidBlock(`${p}[0]`, 'must be an object');
    return requireString(head.text, `${p}[0].text`);
  };
  const text = firstText(item.content, `${param}.content`) ?? firstText(item.summary, `${param}.summary`) ?? '';
  const prev = lastAssistant(out);
  if (prev !== undefined && prev.reasoning === undefined)
    Object.assign(prev, { reasoning: text, reasoning_content: text });
  else out.push({ role: 'assistant', reasoning: text, reasoning_content: text });
}

function convertItem(item: unknown, i: number, out: Json[]): void {
  const param = `input[${i}]`;
  if (!isObject(item)) throw invalidBlock(param, 'must be an object');
  const type = item.type ?? 'message';
  if (type === 'message') {
    if (typeof item.role !== 'string' || !MESSAGE_ROLES.has(item.role)) {
      throw invalidBlock(`${param}.role`, 'must be "user", "system", "developer" or "assistant"');
    }
    if (item.role === 'assistant') assistantItem(item, param, out);
    else out.push({ role: item.role, content: messageContent(item.content, `${param}.content`) });
  } else if (type === 'function_call') {
    const call = {
      id: requireString(item.call_id, `${param}.call_id`),
      type: 'function',
      function: {
        name: requireString(item.name, `${param}.name`),
        arguments: requireString(item.arguments, `${param}.arguments`),
      },
    };
    const prev = lastAssistant(out);
    if (prev === undefined) out.push({ role: 'assistant', tool_calls: [call] });
    else prev.tool_calls = [...((prev.tool_calls as Json[] | undefined) ?? []), call];
  } else if (type === 'function_call_output') {
    const id = requireString(item.call_id, `${param}.call_id`);
    const output = item.output;
    const content = typeof output === 'string' ? output : messageContent(output, `${param}.output`);
    const text = typeof content === 'string' ? content : content.map((p) => p.text as string).join('\n');
    out.push({ role: 'tool', content: text, tool_call_id: id });
  } else if (type === 'reasoning') {
    reasoningItem(item, param, out);
  } else {
    throw invalidBlock(
      `${param}.type`,
      `is ${JSON.stringify(type)}; kvgate converts message, function_call, function_call_output and reasoning items`,
    );
  }
}

function convertTools(tools: unknown, toolChoice: unknown): Json[] | undefined {
  if (tools === undefined || tools === null) return undefined;
  if (!Array.isArray(tools)) throw invalidField('tools', 'must be a list of tools');
  // vLLM wraps every tool, whatever its type (Codex sends `custom` and `local_shell` tools too), so kvgate does.
  const out = tools.map((tool, i) => {
    if (!isObject(tool) || typeof tool.type !== 'string')
      throw invalidField(`tools[${i}]`, 'must be a tool object with a type');
    return { type: 'function', function: tool };
  });
  // vLLM passes no tools to the template when the client forbids their use.
  return toolChoice === 'none' ? undefined : out;
}

/** `convertTools` for each `tool_choice` it tells apart: one function each, as `pythonToolsJson` remembers its answer by it. */
const wrapTools = (tools: unknown): Json[] | undefined => convertTools(tools, undefined);
const noTools = (tools: unknown): Json[] | undefined => convertTools(tools, 'none');

function isUnfinished(item: unknown): boolean {
  if (!isObject(item) || (item.status !== 'in_progress' && item.status !== 'incomplete')) return false;
  return item.type === 'reasoning' || ((item.type ?? 'message') === 'message' && item.role === 'assistant');
}

/** `reasoning.effort`, where the request sets one. */
function reasoningEffort(reasoning: unknown): string | undefined {
  if (reasoning === undefined || reasoning === null) return undefined;
  if (!isObject(reasoning)) throw invalidField('reasoning', 'must be an object');
  const effort = reasoning.effort;
  if (effort === undefined || effort === null) return undefined;
  if (typeof effort !== 'string') throw invalidField('reasoning.effort', 'must be a string');
  return effort;
}

/**
 * The chat request a Responses body runs as; `source`, the body's JSON (UTF-8 bytes), gives the tools' number literals
 * (`toolsJson`).
 * @throws KvgateError KVG_ERR_PREVIOUS_RESPONSE_UNSUPPORTED for `previous_response_id`, KVG_ERR_BACKGROUND_UNSUPPORTED
 *   for `background: true`; KVG_ERR_INVALID_REQUEST (a missing or mistyped field), KVG_ERR_INVALID_CONTENT_BLOCK (a
 *   malformed item or part, an unknown type), KVG_ERR_UNSUPPORTED_CONTENT (images, files, audio); `detail.param` names
 *   the field.
 */
export function responsesToChat(body: Json, source?: Uint8Array): ChatConversion {
  if (typeof body.model !== 'string' || body.model === '') throw invalidField('model', 'is required');
  if (body.previous_response_id !== undefined && body.previous_response_id !== null) {
    throw new KvgateError(
      'KVG_ERR_PREVIOUS_RESPONSE_UNSUPPORTED',
      'previous_response_id is not supported: kvgate stores no responses; send the whole conversation in input',
      { param: 'previous_response_id' },
    );
  }
  // A background response is answered "queued" and read later with GET /v1/responses/{id}: it needs the store
  // kvgate does not serve (and an engine's store would pin the follow-up to one process), so it is refused here
  // rather than sent to an engine that would queue it for a client who could never read it.
  if (body.background !== undefined && body.background !== null && typeof body.background !== 'boolean') {
    throw invalidField('background', 'must be a boolean');
  }
  if (body.background === true) {
    throw new KvgateError(
      'KVG_ERR_BACKGROUND_UNSUPPORTED',
      'background responses are not supported: kvgate stores no responses; send the request without background',
      { param: 'background' },
    );
  }
  if (body.stream !== undefined && typeof body.stream !== 'boolean') throw invalidField('stream', 'must be a boolean');
  const maxOut = body.max_output_tokens;
  if (
    maxOut !== undefined &&
    maxOut !== null &&
    (typeof maxOut !== 'number' || !Number.isInteger(maxOut) || maxOut < 1)
  ) {
    throw invalidField('max_output_tokens', 'must be a positive integer');
  }
  const messages: Json[] = [];
  if (body.instructions !== undefined && body.instructions !== null) {
    const instructions = requireString(body.instructions, 'instructions');
    if (instructions !== '') messages.push({ role: 'system', content: instructions });
  }
  const input = body.input;
  if (typeof input === 'string') messages.push({ role: 'user', content: input });
  else if (Array.isArray(input) && input.length === 0) throw invalidField('input', 'must hold at least one item');
  else if (Array.isArray(input)) input.forEach((item, i) => convertItem(item, i, messages));
  else throw invalidField('input', 'is required (a string or a list of items)');
  const kwargs = body.chat_template_kwargs;
  if (kwargs !== undefined && kwargs !== null && !isObject(kwargs)) {
    throw invalidField('chat_template_kwargs', 'must be an object');
  }
  const effort = reasoningEffort(body.reasoning);
  return {
    messages,
    tools: convertTools(body.tools, body.tool_choice),
    toolsJson: pythonToolsJson(body.tools, source, body.tool_choice === 'none' ? noTools : wrapTools),
    chatTemplateKwargs: chatTemplateKwargsOf({ chat_template_kwargs: kwargs, reasoning_effort: effort }),
    continueFinalMessage: Array.isArray(input) && isUnfinished(input.at(-1)),
  };
}
