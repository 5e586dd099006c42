/**
 * Chat templates (Jinja, as in `tokenizer_config.json`) parsed with
 * @huggingface/jinja, the same engine transformers.js uses, and compiled once
 * into JavaScript (`template-compile.ts`): the compiled render gives the
 * interpreter's exact text at a small part of its cost. A template with a
 * construct the compiler does not reproduce keeps the interpreter, and so does
 * any single render the compiled form cannot finish (an error, or a value it
 * does not model): the interpreter then gives the text or the error.
 *
 * The template sees each message as vLLM's chat parser hands it over, not as
 * the client sent it (`conversationMessage`): content given as a list of parts
 * flattened to text (text parts joined with "\n"; any other part type is
 * rejected); an assistant's `tool_calls` with each call's JSON `arguments`
 * string parsed into its object (none or empty: `{}`), and an empty list
 * dropped; an assistant's `reasoning` (else its deprecated
 * `reasoning_content`) under both names; a tool's `tool_call_id`, a string
 * `name`, a developer's `tools`; no other field. The compiled form sees the
 * arguments' numbers as Python's `json.loads` gives them (tool-arguments.ts:
 * `1.0` printed and written by `tojson` as `1.0`, an integer beyond 2^53
 * exactly), and so does the request's `tools` where the caller gives their
 * text (`toolsJson`, read by the same rules); the interpreter sees JavaScript
 * numbers (`1`), so a template that does more with such a number than print
 * it or `tojson` renders as before.
 */
import { Template } from '@huggingface/jinja';
import type { Logger } from '../common/index.js';
import { KvgateError } from '../errors/index.js';
import { compileTemplate, type CompiledTemplate } from './template-compile.js';
import type { Node } from './template-expressions.js';
import { parseToolArguments } from './tool-arguments.js';
import type { ChatMessage, RenderChatOptions } from './types.js';

/**
 * The fallback tokenizer's template: ChatML, the format of Qwen and many others.
 * `<|im_start|>{role}\n{content}<|im_end|>\n` per message, then
 * `<|im_start|>assistant\n` when a generation prompt is wanted.
 */
export const CHATML_TEMPLATE =
  "{%- for message in messages %}{{ '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}{%- endfor %}" +
  "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{%- endif %}";

export interface ChatTemplateContext {
  bosToken?: string | undefined;
  eosToken?: string | undefined;
  /** Told (debug) when the template keeps the interpreter, with the construct that kept it there. */
  logger?: Logger | undefined;
}

function flattenContent(content: ChatMessage['content'], index: number): string {
  if (content === undefined || content === null) return '';
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) {
    throw new KvgateError(
      'KVG_ERR_INVALID_ARGUMENT',
      `messages[${index}].content must be a string or a list of content parts`,
      { index },
    );
  }
  const texts: string[] = [];
  for (const part of content) {
    if (typeof part !== 'object' || part === null || part.type !== 'text' || typeof part.text !== 'string') {
      throw new KvgateError('KVG_ERR_INVALID_ARGUMENT', `messages[${index}].content: only text parts are supported`, {
        index,
      });
    }
    texts.push(part.text);
  }
  return texts.join('\n');
}

/**
 * Checks and normalizes messages for a template: role a string, content a string, the fields vLLM passes on.
 * `python`: tool-call arguments with Python's numbers (the compiled form's); else JavaScript's (the interpreter's).
 */
function normalizeMessages(messages: readonly ChatMessage[], python: boolean): Record<string, unknown>[] {
  if (!Array.isArray(messages) || messages.length === 0) {
    throw new KvgateError('KVG_ERR_INVALID_ARGUMENT', 'messages must be a non-empty list', {});
  }
  return messages.map((m, i) => {
    if (typeof m !== 'object' || m === null || typeof m.role !== 'string') {
      throw new KvgateError('KVG_ERR_INVALID_ARGUMENT', `messages[${i}] must be an object with a string role`, {
        index: i,
      });
    }
    return conversationMessage(m as unknown as Record<string, unknown>, flattenContent(m.content, i), i, python);
  });
}

/** A message as vLLM's chat parser gives it to the template (module comment): only the fields it carries. */
function conversationMessage(
  m: Record<string, unknown>,
  content: string,
  index: number,
  python: boolean,
): Record<string, unknown> {
  const out: Record<string, unknown> = { role: m.role, content };
  if (m.role === 'assistant') {
    const calls = m.tool_calls;
    if (Array.isArray(calls)) {
      if (calls.length > 0) out.tool_calls = calls.map((c, j) => withParsedArguments(c, index, j, python));
    } else if (calls !== undefined && calls !== null) out.tool_calls = calls;
    // vLLM renames the deprecated `reasoning_content` to `reasoning` where `reasoning` is not set.
    const reasoning = m.reasoning ?? m.reasoning_content;
    if (reasoning !== undefined && reasoning !== null) {
      out.reasoning = reasoning;
      out.reasoning_content = reasoning;
    }
  } else if (m.role === 'tool' && 'tool_call_id' in m) out.tool_call_id = m.tool_call_id;
  if (typeof m.name === 'string') out.name = m.name;
  if (m.role === 'developer') out.tools = m.tools ?? null;
  return out;
}

/** A tool call with its `arguments` as the object its JSON text holds (none or empty: `{}`), as vLLM hands it over. */
function withParsedArguments(call: unknown, index: number, j: number, python: boolean): unknown {
  if (typeof call !== 'object' || call === null) return call;
  const fn = (call as { function?: unknown }).function;
  if (typeof fn !== 'object' || fn === null) return call;
  return {
    ...call,
    function: { ...fn, arguments: parsedArguments((fn as { arguments?: unknown }).arguments, index, j, python) },
  };
}

/** Arguments as vLLM's parser gives them: none or empty `{}`, an object as it is, JSON text parsed; else a 400. */
function parsedArguments(raw: unknown, index: number, j: number, python: boolean): unknown {
  if (raw === undefined || raw === null || raw === '' || raw === 0 || raw === false) return {};
  if (typeof raw === 'object') return raw;
  if (typeof raw === 'string') {
    try {
      return python ? parseToolArguments(raw) : JSON.parse(raw);
    } catch {
      // Refused below, as any other value that is not JSON text.
    }
  }
  const param = `messages[${index}].tool_calls[${j}].function.arguments`;
  throw new KvgateError('KVG_ERR_INVALID_ARGUMENT', `${param} must be JSON text`, { index, param });
}

/** A compiled chat template. Compile once per tokenizer; rendering is synchronous. */
export class ChatTemplate {
  readonly #template: Template;
  readonly #context: ChatTemplateContext;
  readonly #compiled: CompiledTemplate | undefined;
  /** The construct that keeps this template on the interpreter; undefined when it is compiled. */
  readonly interpretedBecause: string | undefined;
  #fallbacks = 0;

  /** @throws KvgateError KVG_ERR_INVALID_CONFIG when the template does not parse. */
  constructor(source: string, context: ChatTemplateContext = {}) {
    try {
      this.#template = new Template(source);
    } catch (err) {
      throw new KvgateError(
        'KVG_ERR_INVALID_CONFIG',
        `chat template does not parse: ${(err as Error).message}`,
        {},
        { cause: err },
      );
    }
    this.#context = context;
    const compiled = compileTemplate(this.#template.parsed as unknown as Node);
    this.#compiled = compiled.render;
    this.interpretedBecause = compiled.render === undefined ? compiled.unsupported : undefined;
    if (compiled.render === undefined) {
      context.logger?.debug({ construct: compiled.unsupported }, 'chat template rendered by the interpreter');
    }
  }

  /** Renders the compiled form handed to the interpreter (an error, or a value it does not model). */
  get fallbacks(): number {
    return this.#fallbacks;
  }

  /** @throws KvgateError KVG_ERR_INVALID_ARGUMENT for malformed messages or a template error on them. */
  render(messages: readonly ChatMessage[], opts: RenderChatOptions = {}): string {
    const parts = this.renderParts(messages, opts);
    return parts.length === 1 ? parts[0]! : parts.join('');
  }

  /**
   * The rendered text as pieces whose concatenation is `render`'s text: the compiled form's pieces in order (a
   * message's content among them as the message holds it), or the interpreter's whole text as one piece.
   * @throws KvgateError as `render`.
   */
  renderParts(messages: readonly ChatMessage[], opts: RenderChatOptions = {}): readonly string[] {
    const vars: Record<string, unknown> = {
      ...opts.extra,
      messages: normalizeMessages(messages, this.#compiled !== undefined),
      add_generation_prompt: opts.addGenerationPrompt ?? true,
      bos_token: this.#context.bosToken ?? '',
      eos_token: this.#context.eosToken ?? '',
    };
    if (opts.tools !== undefined) vars.tools = opts.tools;
    if (this.#compiled !== undefined) {
      try {
        if (opts.tools !== undefined && opts.toolsJson !== undefined) vars.tools = parseToolArguments(opts.toolsJson);
        return this.#compiled(vars);
      } catch {
        this.#fallbacks++;
        // Not an answer yet: the interpreter below gives the exact text or the error (and its message).
        vars.messages = normalizeMessages(messages, false);
        if (opts.tools !== undefined) vars.tools = opts.tools;
      }
    }
    try {
      return [this.#template.render(vars)];
    } catch (err) {
      throw new KvgateError(
        'KVG_ERR_INVALID_ARGUMENT',
        `chat template failed on these messages: ${(err as Error).message}`,
        {},
        { cause: err },
      );
    }
  }
}
