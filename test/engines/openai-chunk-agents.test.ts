/** What a request guard reads of the agent APIs' events and answers, through `readChunkInfo`. */
import { describe, expect, it } from 'vitest';
import { readChunkInfo } from '../../src/engines/index.js';

describe('readChunkInfo on Anthropic Messages and OpenAI Responses events', () => {
  it('reads output deltas, the finish and the usage with cached tokens of a Messages stream and answer', () => {
    expect(readChunkInfo({ type: 'message_start', message: { usage: { input_tokens: 3 } } }).outputChoices).toBe(0);
    const delta = { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'hi' } };
    expect(readChunkInfo(delta).outputChoices).toBe(1);
    const args = { type: 'content_block_delta', index: 0, delta: { type: 'input_json_delta', partial_json: '{' } };
    expect(readChunkInfo(args).outputChoices).toBe(1);
    const end = readChunkInfo({
      type: 'message_delta',
      delta: { stop_reason: 'tool_use' },
      usage: { input_tokens: 10, cache_read_input_tokens: 32, output_tokens: 7 },
    });
    expect(end).toMatchObject({
      finishReason: 'tool_use',
      usage: { promptTokens: 42, completionTokens: 7, cachedTokens: 32 },
    });
    const whole = readChunkInfo({
      type: 'message',
      content: [{ type: 'text', text: 'x' }],
      stop_reason: 'max_tokens',
      usage: { input_tokens: 5, output_tokens: 2 },
    });
    expect(whole).toMatchObject({ outputChoices: 1, finishReason: 'max_tokens', usage: { promptTokens: 5 } });
    const error = { type: 'error', error: { type: 'api_error', message: 'x' } };
    expect(readChunkInfo(error).error).toEqual(error.error);
  });

  it('reads output deltas, the finish and the usage with cached tokens of a Responses stream and answer', () => {
    expect(readChunkInfo({ type: 'response.created', response: { status: 'in_progress' } })).toMatchObject({
      outputChoices: 0,
      finishReason: undefined,
    });
    expect(readChunkInfo({ type: 'response.output_text.delta', delta: 'a' }).outputChoices).toBe(1);
    expect(readChunkInfo({ type: 'response.function_call_arguments.delta', delta: '{' }).outputChoices).toBe(1);
    const usage = { input_tokens: 40, input_tokens_details: { cached_tokens: 32 }, output_tokens: 4 };
    expect(readChunkInfo({ type: 'response.completed', response: { status: 'completed', usage } })).toMatchObject({
      finishReason: 'completed',
      usage: { promptTokens: 40, completionTokens: 4, cachedTokens: 32 },
    });
    const whole = readChunkInfo({ object: 'response', status: 'incomplete', output: [{}], usage });
    expect(whole).toMatchObject({ outputChoices: 1, finishReason: 'incomplete', usage: { cachedTokens: 32 } });
  });

  it("reads a Responses stream's error event (code and message at the top level) and a response.failed's error", () => {
    const error = { type: 'error', code: 'server_error', message: 'x', param: null, sequence_number: 7 };
    expect(readChunkInfo(error).error).toBe(error);
    const failure = { code: 'server_error', message: 'y' };
    const failed = { type: 'response.failed', sequence_number: 8, response: { status: 'failed', error: failure } };
    expect(readChunkInfo(failed).error).toEqual(failure);
    const bare = { type: 'response.failed', sequence_number: 8, response: { status: 'failed' } };
    expect(readChunkInfo(bare).error).toBe(bare);
    // A finished or cut-short response is no error.
    expect(readChunkInfo({ type: 'response.incomplete', response: { status: 'incomplete' } }).error).toBeUndefined();
  });
});
