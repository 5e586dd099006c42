/**
 * `max_tokens: 0` asks an engine for nothing: vLLM answers 400 after the
 * request was routed and booked. kvgate refuses it before either, naming the
 * field, except on a completion with `echo` (scoring a prompt's logprobs,
 * which generates nothing on purpose).
 */
import { describe, expect, it } from 'vitest';
import { validateBody } from '../../src/frontend/schemas.js';
import { KvgateError } from '../../src/errors/index.js';

const LIMITS = { maxMessages: 100 };
const messages = [{ role: 'user', content: 'hi' }];

function refusal(kind: 'chat' | 'completion', body: Record<string, unknown>): { code: string; param: unknown } {
  try {
    validateBody(kind, body, LIMITS);
  } catch (err) {
    expect(err).toBeInstanceOf(KvgateError);
    return { code: (err as KvgateError).code, param: (err as KvgateError).detail?.param };
  }
  throw new Error('expected a refusal');
}

describe('max_tokens: 0', () => {
  it('is refused on a chat, as max_tokens or max_completion_tokens, naming the field', () => {
    expect(refusal('chat', { model: 'm', messages, max_tokens: 0 })).toEqual({
      code: 'KVG_ERR_INVALID_REQUEST',
      param: 'max_tokens',
    });
    expect(refusal('chat', { model: 'm', messages, max_completion_tokens: 0 })).toEqual({
      code: 'KVG_ERR_INVALID_REQUEST',
      param: 'max_completion_tokens',
    });
  });

  it('is refused on a completion without echo, accepted with echo', () => {
    expect(refusal('completion', { model: 'm', prompt: 'x', max_tokens: 0 })).toEqual({
      code: 'KVG_ERR_INVALID_REQUEST',
      param: 'max_tokens',
    });
    expect(refusal('completion', { model: 'm', prompt: 'x', max_tokens: 0, echo: false }).param).toBe('max_tokens');
    expect(() =>
      validateBody('completion', { model: 'm', prompt: 'x', max_tokens: 0, echo: true }, LIMITS),
    ).not.toThrow();
  });

  it('1 and null stay accepted everywhere', () => {
    for (const v of [1, null]) {
      expect(() => validateBody('chat', { model: 'm', messages, max_tokens: v }, LIMITS)).not.toThrow();
      expect(() => validateBody('chat', { model: 'm', messages, max_completion_tokens: v }, LIMITS)).not.toThrow();
      expect(() => validateBody('completion', { model: 'm', prompt: 'x', max_tokens: v }, LIMITS)).not.toThrow();
    }
  });
});
