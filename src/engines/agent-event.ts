/**
 * What a request guard reads of the agent APIs' events and answers (Anthropic Messages, OpenAI Responses), the
 * same facts `readChunkInfo` reads of an OpenAI chunk: whether the event carries generated output (a text or
 * tool-argument delta), the finish (Anthropic's `stop_reason`, a finished response's `status`) and the usage,
 * with the prompt tokens the engine's cache served. Tolerant: fields of the wrong type read as absent.
 */
import type { ChunkInfo, ChunkUsage } from './openai-chunk.js';

function obj(value: unknown): Record<string, unknown> | undefined {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
    ? (value as Record<string, unknown>)
    : undefined;
}

function num(value: unknown): number | undefined {
  return typeof value === 'number' && Number.isFinite(value) ? value : undefined;
}

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
export function readAgentEvent(type: string, root: Record<string, unknown>, info: ChunkInfo): void {
  if (OUTPUT_EVENTS.has(type)) info.outputChoices = 1;
  else if (type === 'message') {
    info.outputChoices = Array.isArray(root['content']) && root['content'].length > 0 ? 1 : 0;
    if (typeof root['stop_reason'] === 'string') info.finishReason = root['stop_reason'];
    info.usage = anthropicUsage(obj(root['usage']));
  } else if (type === 'message_delta') {
    const reason = obj(root['delta'])?.['stop_reason'];
    if (typeof reason === 'string') info.finishReason = reason;
    info.usage = anthropicUsage(obj(root['usage']));
  } else if (type === 'response' || type === 'response.completed' || type === 'response.incomplete') {
    const r = type === 'response' ? root : obj(root['response']);
    const status = r?.['status'];
    if (typeof status === 'string' && status !== 'in_progress') info.finishReason = status;
    if (type === 'response' && Array.isArray(r?.['output']) && r['output'].length > 0) info.outputChoices = 1;
    info.usage = responsesUsage(obj(r?.['usage']));
  }
}
