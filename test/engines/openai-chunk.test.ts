import { describe, expect, it } from 'vitest';
import { readChunkInfo } from '../../src/engines/index.js';

describe('readChunkInfo', () => {
  it('a role-only first chat chunk has no output', () => {
    expect(
      readChunkInfo({ choices: [{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null }] }),
    ).toEqual({
      outputChoices: 0,
      tokenIds: undefined,
      finishReason: undefined,
      usage: undefined,
      error: undefined,
    });
  });

  it('counts choices with content, reasoning, tool calls, completion text or token ids', () => {
    const info = readChunkInfo({
      choices: [
        { index: 0, delta: { content: 'Hi' } },
        { index: 1, delta: { reasoning_content: 'hmm' } },
        { index: 2, delta: { tool_calls: [{ index: 0, function: { arguments: '{' } }] } },
        { index: 3, text: 'x', token_ids: [11, 12] },
        { index: 4, text: '', token_ids: [13] },
        { index: 5, delta: {} },
      ],
    });
    expect(info.outputChoices).toBe(5);
    expect(info.tokenIds).toBe(3);
  });

  it('reads the finish reason and usage with cached tokens (final usage-only chunk)', () => {
    expect(readChunkInfo({ choices: [{ index: 0, text: '.', finish_reason: 'stop' }] }).finishReason).toBe('stop');
    const info = readChunkInfo({
      choices: [],
      usage: { prompt_tokens: 100, completion_tokens: 7, prompt_tokens_details: { cached_tokens: 64 } },
    });
    expect(info.usage).toEqual({ promptTokens: 100, completionTokens: 7, cachedTokens: 64 });
    expect(info.outputChoices).toBe(0);
  });

  it('reads a whole non-streaming response the same way', () => {
    const info = readChunkInfo({
      choices: [{ index: 0, message: { role: 'assistant', content: 'done' }, finish_reason: 'length' }],
      usage: { prompt_tokens: 3 },
    });
    expect(info).toMatchObject({
      outputChoices: 1,
      finishReason: 'length',
      usage: { promptTokens: 3, completionTokens: undefined, cachedTokens: undefined },
    });
  });

  it('surfaces an in-stream error and tolerates garbage', () => {
    expect(readChunkInfo({ error: { message: 'boom', code: 500 } }).error).toEqual({ message: 'boom', code: 500 });
    for (const junk of [
      undefined,
      null,
      'x',
      3,
      [1],
      { choices: 'no' },
      { choices: [null, 1] },
      { usage: { prompt_tokens: 'a' } },
    ]) {
      const info = readChunkInfo(junk);
      expect(info.outputChoices).toBe(0);
      expect(info.usage?.promptTokens).toBeUndefined();
    }
  });
});
