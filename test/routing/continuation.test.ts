/**
 * The pure half of request migration (issue 14 items 1 and 3): which requests may be resumed mid-stream,
 * the continuation request, and the continuation's chunks as the client sees them.
 */
import { describe, expect, it } from 'vitest';
import { continuationRequest, midStreamBlocker, StreamProgress } from '../../src/routing/push/continuation.js';

describe('midStreamBlocker', () => {
  it('guided decoding, tools with tool_choice required, n > 1, logprobs and echo are not resumed mid-stream', () => {
    expect(midStreamBlocker({ response_format: { type: 'json_object' } })).toBe('guided');
    expect(midStreamBlocker({ guided_regex: 'a+' })).toBe('guided');
    expect(midStreamBlocker({ tools: [{ type: 'function', function: { name: 'f' } }], tool_choice: 'required' })).toBe(
      'tools',
    );
    expect(midStreamBlocker({ n: 2 })).toBe('n');
    expect(midStreamBlocker({ logprobs: true, top_logprobs: 2 })).toBe('logprobs');
    expect(midStreamBlocker({ echo: true })).toBe('echo');
  });

  it('a plain request, text response_format, or tools turned off can be resumed', () => {
    expect(midStreamBlocker({ messages: [], max_tokens: 5 })).toBeUndefined();
    expect(midStreamBlocker({ response_format: { type: 'text' }, n: 1 })).toBeUndefined();
    expect(midStreamBlocker({ tools: [{ type: 'function' }], tool_choice: 'none' })).toBeUndefined();
  });
});

describe('continuationRequest', () => {
  it('a chat resumes as a completion of the prompt ids and the generated ids, max_tokens reduced', () => {
    const out = continuationRequest(
      '/v1/chat/completions',
      {
        model: 'm',
        messages: [{ role: 'user', content: 'x' }],
        max_completion_tokens: 10,
        min_tokens: 4,
        seed: 7,
        stream: true,
      },
      [1, 2, 3],
      [9, 8, 7],
    );
    expect(out).toEqual({
      path: '/v1/completions',
      body: { model: 'm', prompt: [1, 2, 3, 9, 8, 7], max_tokens: 7, min_tokens: 1, seed: 7, stream: true },
    });
  });

  it('nothing left to generate: no continuation', () => {
    expect(continuationRequest('/v1/completions', { prompt: 'x', max_tokens: 2 }, [1], [5, 6])).toBeUndefined();
  });
});

describe('StreamProgress', () => {
  it('strips the token ids kvgate asked for, records them, and reshapes a continuation with usage over the whole answer', () => {
    const p = new StreamProgress('/v1/chat/completions', {});
    p.startLeg(false);
    const first = p.clientChunk({
      id: 'chatcmpl-a',
      object: 'chat.completion.chunk',
      created: 1,
      model: 'm',
      prompt_token_ids: [1, 2],
      choices: [{ index: 0, delta: { role: 'assistant', content: '' }, token_ids: [] }],
    });
    expect(first).toEqual({
      id: 'chatcmpl-a',
      object: 'chat.completion.chunk',
      created: 1,
      model: 'm',
      choices: [{ index: 0, delta: { role: 'assistant', content: '' } }],
    });
    p.clientChunk({
      id: 'chatcmpl-a',
      object: 'chat.completion.chunk',
      created: 1,
      model: 'm',
      choices: [{ index: 0, delta: { content: ' a' }, token_ids: [5] }],
    });
    expect(p.promptIds).toEqual([1, 2]);
    expect(p.generated).toEqual([5]);
    p.startLeg(true);
    const next = p.clientChunk({
      id: 'cmpl-a',
      object: 'text_completion',
      created: 2,
      model: 'm',
      choices: [{ index: 0, text: ' b', token_ids: [6], prompt_token_ids: [1, 2, 5], finish_reason: 'length' }],
    });
    expect(next).toEqual({
      id: 'chatcmpl-a',
      object: 'chat.completion.chunk',
      created: 1,
      model: 'm',
      choices: [{ index: 0, delta: { content: ' b' }, logprobs: null, finish_reason: 'length', stop_reason: null }],
    });
    const usage = p.clientChunk({
      id: 'cmpl-a',
      object: 'text_completion',
      created: 2,
      model: 'm',
      choices: [],
      usage: { prompt_tokens: 3, completion_tokens: 1, total_tokens: 4 },
    });
    expect(usage?.['usage']).toEqual({ prompt_tokens: 2, completion_tokens: 2, total_tokens: 4 });
    expect(p.finished).toBe(true);
  });
});
