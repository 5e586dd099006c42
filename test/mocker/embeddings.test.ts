import { describe, expect, it } from 'vitest';
import { EMBEDDING_DIMENSIONS, embeddingOf } from '../../src/mocker/embeddings.js';

const norm = (v: Float32Array): number => Math.hypot(...v);

describe('embeddingOf', () => {
  it('is a unit vector determined by the token ids alone', () => {
    const a = embeddingOf([1, 2, 3], EMBEDDING_DIMENSIONS);
    expect(a).toHaveLength(EMBEDDING_DIMENSIONS);
    expect(norm(a)).toBeCloseTo(1, 5);
    expect(embeddingOf([1, 2, 3], EMBEDDING_DIMENSIONS)).toEqual(a);
    expect(embeddingOf([1, 2, 4], EMBEDDING_DIMENSIONS)).not.toEqual(a);
    expect(embeddingOf([3, 2, 1], EMBEDDING_DIMENSIONS)).not.toEqual(a);
  });

  it('shortened, is the full vector’s head renormalized (Matryoshka)', () => {
    const full = embeddingOf([9, 8], EMBEDDING_DIMENSIONS);
    const head = embeddingOf([9, 8], 8);
    expect(norm(head)).toBeCloseTo(1, 5);
    const scale = head[0]! / full[0]!;
    head.forEach((x, i) => expect(x).toBeCloseTo(full[i]! * scale, 5));
  });
});
