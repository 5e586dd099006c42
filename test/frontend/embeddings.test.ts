import { describe, expect, it } from 'vitest';
import { embeddingsTask } from '../../src/frontend/embeddings.js';

const base = { model: 'm', maxPromptTokens: 100, loraName: undefined, tokenData: undefined };

describe('embeddingsTask', () => {
  it('weighs a text, texts joined by newlines, token ids and lists of them', () => {
    expect(embeddingsTask({ ...base, body: { input: 'a b' } })).toMatchObject({ kind: 'text', prompt: 'a b' });
    const texts = embeddingsTask({ ...base, body: { input: ['a', 'b', 'c'], add_special_tokens: false } });
    expect(texts).toMatchObject({ kind: 'text', prompt: 'a\nb\nc', maxPromptTokens: 300, addSpecialTokens: false });
    const ids = embeddingsTask({ ...base, body: { input: [5, 6, 7] } });
    expect(ids).toMatchObject({ kind: 'tokens', maxPromptTokens: 100 });
    expect(Array.from((ids as { tokenIds: Uint32Array }).tokenIds)).toEqual([5, 6, 7]);
    const lists = embeddingsTask({ ...base, body: { input: [[1, 2], [3]] } });
    expect(lists.maxPromptTokens).toBe(200);
    expect(Array.from((lists as { tokenIds: Uint32Array }).tokenIds)).toEqual([1, 2, 3]);
  });

  it('refuses nvext.token_data: the inputs carry their own ids', () => {
    expect(() => embeddingsTask({ ...base, body: { input: 'x' }, tokenData: Uint32Array.of(1) })).toThrow(
      expect.objectContaining({ code: 'KVG_ERR_UNSUPPORTED_CONTENT' }),
    );
  });
});
