/**
 * An Anthropic Messages request (`POST /v1/messages`) → the chat messages and tools vLLM's Messages front end
 * runs it as, checked on the way. The rules are vLLM's (its `_convert_anthropic_to_openai_request`):
 *
 * - `system`: a string is one leading system message; a list keeps its non-empty `text` blocks, drops
 *   Claude Code's per-request `x-anthropic-billing-header` line (it would defeat prefix caching), and joins
 *   the rest with no separator (a list left empty still gives an empty system message).
 * - Each message's blocks are walked in order: `text` (non-empty) → a text part; `thinking` → the turn's
 *   reasoning; `redacted_thinking` → dropped; `tool_use` → a tool call whose arguments are Python's
 *   `json.dumps` of `input`; a user's `tool_result` → a `tool` message emitted before the user's own
 *   message (its text items joined with "\n"); an assistant's `tool_result` → the text "Tool result: …".
 *   One text part becomes plain `content`; a user message left with no content is not emitted.
 * - Tools become chat function tools (`input_schema` as `parameters`, `type: "object"` added if missing).
 * - System messages inside `messages` (and the `ctx` and `msg` roles) are placed first, as inline-system.ts says:
 *   those at the head extend the system prompt (joined with "\n\n"), the others stay system turns or fold into user
 *   messages (`InlineSystemMode`).
 * - `output_config.effort` is the chat request's `reasoning_effort` (vLLM's `_handle_output_config`), so it reaches
 *   the template as a chat completion's does (template-kwargs.ts). `thinking` is not mapped (vLLM does not).
 */
import {
  type ChatConversion,
  type Json,
  invalidBlock,
  invalidField,
  isObject,
  requireString,
  unsupportedBlock,
} from './agent-convert.js';
import { holdsIntegralNumber, InputSources, pythonJson, pythonToolsJson } from './python-json.js';
import { placeInlineSystem, systemText, type InlineSystemMode } from './inline-system.js';
import { chatTemplateKwargsOf } from './template-kwargs.js';

/** The block types of Anthropic's Messages API that a request may carry (others are refused). */
const BLOCK_TYPES = new Set([
  'text',
  'image',
  'document',
  'tool_use',
  'tool_result',
  'tool_reference',
  'thinking',
  'redacted_thinking',
]);

/**
 * The system prompt's text: a string as it is, a list's non-empty `text` blocks joined with no separator, less
 * the billing header. Undefined where the request has none (absent, empty string or empty list).
 */
function systemPromptText(system: unknown): string | undefined {
  if (system === undefined || system === null) return undefined;
  if (typeof system === 'string') return system === '' ? undefined : system;
  if (!Array.isArray(system)) throw invalidField('system', 'must be a string or a list of text blocks');
  if (system.length === 0) return undefined;
  system.forEach((block, i) => {
    if (!isObject(block) || block.type !== 'text') throw invalidBlock(`system[${i}]`, 'must be a text block');
    requireString(block.text, `system[${i}].text`);
  });
  // Checked to be text blocks: their text is joined as a system message's is.
  return systemText(system, 'system');
}

/** The efforts vLLM's Messages request takes in `output_config.effort` (its `AnthropicOutputConfig`). */
const EFFORTS = new Set(['low', 'medium', 'high', 'xhigh', 'max']);

/** `output_config.effort`, checked as vLLM's request model checks it; undefined where there is none. */
function outputEffort(config: unknown): string | undefined {
  if (config === undefined || config === null) return undefined;
  if (!isObject(config)) throw invalidField('output_config', 'must be an object');
  const effort = config.effort;
  if (effort === undefined || effort === null) return undefined;
  if (typeof effort !== 'string' || !EFFORTS.has(effort)) {
    throw invalidField('output_config.effort', 'must be one of "low", "medium", "high", "xhigh" or "max"');
  }
  return effort;
}

/**
 * Blocks the API has that kvgate refuses as not text (KVG_ERR_UNSUPPORTED_CONTENT, as a chat's image part):
 * images, and documents (a PDF Claude Code reads, a text source), which the engine's front end does not convert.
 */
const NOT_TEXT = new Set(['image', 'document']);

/** A tool result's content as vLLM's tool message holds it: a string, or its text items joined with "\n". */
function toolResultText(content: unknown, param: string): string {
  if (content === undefined || content === null) return '';
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) throw invalidBlock(param, 'must be a string or a list of content blocks');
  const texts: string[] = [];
  content.forEach((item, i) => {
    if (!isObject(item) || typeof item.type !== 'string')
      throw invalidBlock(`${param}[${i}]`, 'must be a content block');
    if (item.type === 'text') texts.push(requireString(item.text, `${param}[${i}].text`));
    else if (NOT_TEXT.has(item.type)) throw unsupportedBlock(`${param}[${i}].type`, item.type);
    else if (item.type !== 'tool_reference')
      throw invalidBlock(`${param}[${i}].type`, `is ${JSON.stringify(item.type)}`);
  });
  return texts.join('\n');
}

interface Turn {
  parts: Json[];
  toolCalls: Json[];
  reasoning: string | undefined;
  /** Tool messages a user turn's tool_result blocks give, emitted ahead of the turn. */
  before: Json[];
  /** The body's text, where a tool_use input's literals are read (undefined: its parse is written). */
  sources: InputSources | undefined;
}

/**
 * A tool_use block's arguments: `json.dumps` of its input, each number as Python writes its literal. Only an input
 * holding an integral number needs the body's text (a non-integral one came from a float literal, so its parse says
 * how Python writes it); without that text it is written as an integer.
 */
function toolArguments(input: Json, sources: InputSources | undefined): string {
  const literal = sources !== undefined && holdsIntegralNumber(input) ? sources.take(input) : undefined;
  return pythonJson(literal ?? input);
}

function walkBlock(turn: Turn, role: string, block: unknown, param: string): void {
  if (!isObject(block) || typeof block.type !== 'string') throw invalidBlock(param, 'must be an object with a type');
  const type = block.type;
  if (!BLOCK_TYPES.has(type)) {
    throw invalidBlock(`${param}.type`, `is ${JSON.stringify(type)}; not a content block type kvgate converts`);
  }
  if (type === 'text') {
    const text = requireString(block.text, `${param}.text`);
    if (text !== '') turn.parts.push({ type: 'text', text });
  } else if (NOT_TEXT.has(type)) {
    throw unsupportedBlock(`${param}.type`, type);
  } else if (type === 'thinking') {
    turn.reasoning = (turn.reasoning ?? '') + requireString(block.thinking, `${param}.thinking`);
  } else if (type === 'tool_use') {
    if (block.input !== undefined && !isObject(block.input)) throw invalidBlock(`${param}.input`, 'must be an object');
    const name = block.name === undefined ? '' : requireString(block.name, `${param}.name`);
    const id = requireString(block.id, `${param}.id`);
    turn.toolCalls.push({
      id,
      type: 'function',
      function: { name, arguments: toolArguments(block.input ?? {}, turn.sources) },
    });
  } else if (type === 'tool_result') {
    const id = block.tool_use_id === undefined ? '' : requireString(block.tool_use_id, `${param}.tool_use_id`);
    const text = toolResultText(block.content, `${param}.content`);
    if (role === 'user') turn.before.push({ role: 'tool', tool_call_id: id, content: text });
    else turn.parts.push({ type: 'text', text: `Tool result: ${text}` });
  }
  // redacted_thinking and a top-level tool_reference add nothing to the prompt.
}

function convertTurn(message: Json, i: number, out: Json[], sources: InputSources | undefined): void {
  const param = `messages[${i}]`;
  const role = message.role;
  if (role === 'system') {
    // An inline system message kept as a system turn (`preserve`).
    const text = systemText(message.content, `${param}.content`);
    if (text !== '') out.push({ role: 'system', content: text });
    return;
  }
  if (role !== 'user' && role !== 'assistant') {
    throw invalidField(`${param}.role`, 'must be "user", "assistant" or "system" ("ctx" and "msg" are user messages)');
  }
  const content = message.content;
  if (typeof content === 'string') {
    out.push({ role, content });
    return;
  }
  if (!Array.isArray(content)) throw invalidField(`${param}.content`, 'must be a string or a list of content blocks');
  const turn: Turn = { parts: [], toolCalls: [], reasoning: undefined, before: [], sources };
  content.forEach((block, j) => walkBlock(turn, role, block, `${param}.content[${j}]`));
  out.push(...turn.before);
  const msg: Json = { role };
  if (turn.parts.length === 1) msg.content = turn.parts[0]!.text;
  else if (turn.parts.length > 1) msg.content = turn.parts;
  if (role === 'assistant') {
    // vLLM's chat layer hands the template the reasoning under both names.
    if (turn.reasoning !== undefined)
      Object.assign(msg, { reasoning: turn.reasoning, reasoning_content: turn.reasoning });
    if (turn.toolCalls.length > 0) msg.tool_calls = turn.toolCalls;
    out.push(msg);
  } else if (msg.content !== undefined) out.push(msg);
}

function convertTools(tools: unknown): Json[] | undefined {
  if (tools === undefined || tools === null) return undefined;
  if (!Array.isArray(tools)) throw invalidField('tools', 'must be a list of tools');
  return tools.map((tool, i) => {
    if (!isObject(tool)) throw invalidField(`tools[${i}]`, 'must be an object');
    const name = requireString(tool.name, `tools[${i}].name`);
    if (!isObject(tool.input_schema)) throw invalidField(`tools[${i}].input_schema`, 'must be an object');
    const parameters = 'type' in tool.input_schema ? tool.input_schema : { ...tool.input_schema, type: 'object' };
    const fn: Json = { name };
    if (tool.description !== undefined) fn.description = requireString(tool.description, `tools[${i}].description`);
    fn.parameters = parameters;
    return { type: 'function', function: fn };
  });
}

/**
 * The chat request a Messages body runs as. `source`: the body's JSON (UTF-8 bytes), where a tool_use input's number literals
 * are read (`1.0` stays `1.0` in its arguments, as vLLM's `json.dumps` writes it), and the tools' (`toolsJson`);
 * without it they are written from the parse.
 * @throws KvgateError KVG_ERR_INVALID_REQUEST (a missing or mistyped field: `max_tokens`, `messages`, a role,
 *   `system`, a tool, `output_config.effort`), KVG_ERR_INVALID_CONTENT_BLOCK (a malformed block or one of an unknown type),
 *   KVG_ERR_UNSUPPORTED_CONTENT (images, documents); `detail.param` names the field.
 */
export function messagesToChat(
  body: Json,
  inlineSystem: InlineSystemMode = 'preserve',
  source?: Uint8Array,
): ChatConversion {
  if (typeof body.model !== 'string' || body.model === '') throw invalidField('model', 'is required');
  const maxTokens = body.max_tokens;
  if (maxTokens === undefined) throw invalidField('max_tokens', 'is required');
  if (typeof maxTokens !== 'number' || !Number.isInteger(maxTokens) || maxTokens < 1) {
    throw invalidField('max_tokens', 'must be a positive integer');
  }
  if (body.stream !== undefined && typeof body.stream !== 'boolean') throw invalidField('stream', 'must be a boolean');
  if (!Array.isArray(body.messages)) throw invalidField('messages', 'is required (a list of messages)');
  if (body.messages.length === 0) throw invalidField('messages', 'must hold at least one message');
  const messages: Json[] = [];
  const prompt = systemPromptText(body.system);
  const placed = placeInlineSystem(body.messages, prompt ?? '', inlineSystem);
  // The system messages at the head of `messages` extend the system prompt (or are it, where there is none).
  if (prompt !== undefined || placed.leading !== '') {
    messages.push({ role: 'system', content: [prompt ?? '', placed.leading].filter((t) => t !== '').join('\n\n') });
  }
  const sources = source === undefined ? undefined : new InputSources(source);
  for (const m of placed.messages) convertTurn(m.message, m.index, messages, sources);
  const kwargs = body.chat_template_kwargs;
  if (kwargs !== undefined && kwargs !== null && !isObject(kwargs)) {
    throw invalidField('chat_template_kwargs', 'must be an object');
  }
  const effort = outputEffort(body.output_config);
  return {
    messages,
    tools: convertTools(body.tools),
    toolsJson: pythonToolsJson(body.tools, source, convertTools),
    chatTemplateKwargs: chatTemplateKwargsOf({ chat_template_kwargs: kwargs, reasoning_effort: effort }),
    continueFinalMessage: false,
  };
}
