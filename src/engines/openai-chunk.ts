/**
 * Reads what a request guard needs from one parsed OpenAI-style response
 * object (a streamed `chat.completion.chunk` / `text_completion` chunk, or a
 * whole non-streaming response): whether it carries generated output, how
 * many token ids it carries when the engine sends them, the finish reason,
 * usage (with `prompt_tokens_details.cached_tokens`, the engine's own count
 * of prefix-cache hits) and an in-stream error. Tolerant by design: fields
 * of the wrong type read as absent; it never throws.
 *
 * The same facts of the agent APIs' events and answers (Anthropic Messages,
 * OpenAI Responses: any object naming its `type`, or `object: "response"`):
 * a text or tool-argument delta is output, the finish is Anthropic's
 * `stop_reason` or a finished response's `status`, the usage carries the
 * prompt tokens the cache served, and the error of an error event is
 * Anthropic's `error` member, a Responses `error` event itself (its code and
 * message are top-level) or a `response.failed` event's `response.error`.
 */

export interface ChunkUsage {
  promptTokens: number | undefined;
  completionTokens: number | undefined;
  /** `prompt_tokens_details.cached_tokens`. */
  cachedTokens: number | undefined;
}

export interface ChunkInfo {
  /** Choices that carry generated output: text, content, reasoning, tool calls or token ids. A role-only first chunk has none. */
  outputChoices: number;
  /** Sum of `token_ids` lengths over the choices when the engine sends them (vLLM `return_token_ids`), else undefined. */
  tokenIds: number | undefined;
  /** The first non-null `finish_reason` among the choices. */
  finishReason: string | undefined;
  usage: ChunkUsage | undefined;
  /** The `error` member of an error event (engines emit `{"error": {...}}` when generation fails mid-stream). */
  error: unknown;
}

function obj(value: unknown): Record<string, unknown> | undefined {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
    ? (value as Record<string, unknown>)
    : undefined;
}

function num(value: unknown): number | undefined {
  return typeof value === 'number' && Number.isFinite(value) ? value : undefined;
}

function nonEmpty(value: unknown): boolean {
  return (typeof value === 'string' && value.length > 0) || (Array.isArray(value) && value.length > 0);
}

export function readChunkInfo(json: unknown): ChunkInfo {
  const root = obj(json);
  const info: ChunkInfo = {
    outputChoices: 0,
    tokenIds: undefined,
    finishReason: undefined,
    usage: undefined,
    error: undefined,
  };
  if (root === undefined) return info;
  info.error = root['error'];
  // The agent APIs' events and Anthropic's message name their `type`; a whole Responses answer is `object: "response"`.
  const type = typeof root['type'] === 'string' ? root['type'] : root['object'] === 'response' ? 'response' : undefined;
  if (type !== undefined) {
    readAgentEvent(type, root, info);
    return info;
  }
  const choices = root['choices'];
  if (Array.isArray(choices)) {
    for (const c of choices) {
      const choice = obj(c);
      if (choice === undefined) continue;
      const delta = obj(choice['delta']) ?? obj(choice['message']);
      const tokenIds = choice['token_ids'];
      const hasOutput =
        nonEmpty(choice['text']) ||
        nonEmpty(tokenIds) ||
        (delta !== undefined &&
          (nonEmpty(delta['content']) ||
            nonEmpty(delta['reasoning_content']) ||
            nonEmpty(delta['reasoning']) ||
            nonEmpty(delta['tool_calls'])));
      if (hasOutput) info.outputChoices++;
      if (Array.isArray(tokenIds)) info.tokenIds = (info.tokenIds ?? 0) + tokenIds.length;
      if (info.finishReason === undefined && typeof choice['finish_reason'] === 'string')
        info.finishReason = choice['finish_reason'];
    }
  }
  const usage = obj(root['usage']);
  if (usage !== undefined) {
    info.usage = {
      promptTokens: num(usage['prompt_tokens']),
      completionTokens: num(usage['completion_tokens']),
      cachedTokens: num(obj(usage['prompt_tokens_details'])?.['cached_tokens']),
    };
  }
  return info;
}

/** The final `include_usage` chunk: usage and no choices. */
export function isUsageOnlyChunk(json: unknown): boolean {
  const root = obj(json);
  return (
    root !== undefined &&
    Array.isArray(root['choices']) &&
    root['choices'].length === 0 &&
    obj(root['usage']) !== undefined
  );
}

// The agent APIs (Anthropic Messages, OpenAI Responses): the same facts of their events and answers.

/** Anthropic's usage: `input_tokens` leaves out the tokens read from the cache (`cache_read_input_tokens`). */
function anthropicUsage(u: Record<string, unknown> | undefined): ChunkUsage | undefined {
  if (u === undefined) return undefined;
  const cached = num(u['cache_read_input_tokens']);
  const input = num(u['input_tokens']);
  return {
    promptTokens: input === undefined ? undefined : input + (cached ?? 0),
    completionTokens: num(u['output_tokens']),
    cachedTokens: cached,
  };
}

function responsesUsage(u: Record<string, unknown> | undefined): ChunkUsage | undefined {
  if (u === undefined) return undefined;
  return {
    promptTokens: num(u['input_tokens']),
    completionTokens: num(u['output_tokens']),
    cachedTokens: num(obj(u['input_tokens_details'])?.['cached_tokens']),
  };
}

const OUTPUT_EVENTS = new Set([
  'content_block_delta',
  'response.output_text.delta',
  'response.function_call_arguments.delta',
  'response.reasoning_text.delta',
]);

/** Reads an event or answer of the agent APIs into `info`: `type` is the event's, or `response` for a whole Responses answer. */
function readAgentEvent(type: string, root: Record<string, unknown>, info: ChunkInfo): void {
  if (OUTPUT_EVENTS.has(type)) info.outputChoices = 1;
  else if (type === 'message') {
    info.outputChoices = Array.isArray(root['content']) && root['content'].length > 0 ? 1 : 0;
    if (typeof root['stop_reason'] === 'string') info.finishReason = root['stop_reason'];
    info.usage = anthropicUsage(obj(root['usage']));
  } else if (type === 'message_delta') {
    const reason = obj(root['delta'])?.['stop_reason'];
    if (typeof reason === 'string') info.finishReason = reason;
    info.usage = anthropicUsage(obj(root['usage']));
  } else if (type === 'error') {
    // The Responses API's error event carries its code and message at the top level (Anthropic's nests them in
    // `error`, read already): the event itself is the error, so the guard fails the leg instead of passing it on.
    info.error ??= root;
  } else if (type === 'response.failed') {
    // A failed response ends the stream as an error event does; its error object, or the event when it has none.
    const r = obj(root['response']);
    info.error ??= obj(r?.['error']) ?? root;
  } else if (type === 'response' || type === 'response.completed' || type === 'response.incomplete') {
    const r = type === 'response' ? root : obj(root['response']);
    const status = r?.['status'];
    if (typeof status === 'string' && status !== 'in_progress') info.finishReason = status;
    if (type === 'response' && Array.isArray(r?.['output']) && r['output'].length > 0) info.outputChoices = 1;
    info.usage = responsesUsage(obj(r?.['usage']));
  }
}
