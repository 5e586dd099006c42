/**
 * A JSON array of token ids read from its bytes into a Uint32Array: exactly what JSON.parse reads for the plain form
 * (random arrays, JSON white space anywhere between tokens, the range's ends), and nothing for any other form, which
 * the caller then parses as JSON.
 */
import { describe, expect, it } from 'vitest';
import { jsonIdArray } from '../../src/common/index.js';
import { seededRng } from '../../src/common/index.js';

const SPACES = [' ', '\n', '\r', '\t'];

describe('jsonIdArray', () => {
  it('reads plain id arrays as JSON.parse does, with white space anywhere between tokens, and says where they end', () => {
    const rnd = seededRng(11);
    for (let round = 0; round < 200; round++) {
      const n = 1 + Math.floor(rnd() * 300);
      const ids = Array.from({ length: n }, () =>
        rnd() < 0.05 ? [0, 4294967295, 9, 10][Math.floor(rnd() * 4)]! : Math.floor(rnd() * 2 ** (1 + rnd() * 31)),
      );
      const space = (): string => (rnd() < 0.2 ? SPACES[Math.floor(rnd() * 4)]!.repeat(1 + Math.floor(rnd() * 3)) : '');
      const array = `[${space()}${ids.map((id) => `${id}${space()}`).join(`,${space()}`)}]`;
      const text = `{"prompt":${array},"x":1}`;
      const start = text.indexOf('[');
      const read = jsonIdArray(Buffer.from(text), start);
      expect(read, array.slice(0, 80)).toBeDefined();
      expect([...read!.ids]).toEqual(JSON.parse(array));
      expect(read!.end).toBe(start + array.length);
      // Its own buffer, exactly its length: it can be moved to another thread.
      expect(read!.ids.byteLength).toBe(read!.ids.buffer.byteLength);
    }
  });

  it('reads ids from a Buffer view into a larger allocation, and past its first guess of the count', () => {
    const ids = Array.from({ length: 5000 }, (_, i) => i % 10);
    const slab = Buffer.concat([Buffer.from('xxxx'), Buffer.from(JSON.stringify(ids)), Buffer.from('yy')]);
    const view = slab.subarray(4, slab.length - 2);
    expect([...jsonIdArray(view, 0)!.ids]).toEqual(ids);
  });

  it('answers nothing for every form it does not read, so the caller parses it as JSON', () => {
    const others = [
      '[]',
      '[ ]',
      '[1.0]',
      '[1e3]',
      '[1E3]',
      '[-1]',
      '[01]',
      '[00]',
      '[4294967296]',
      '[99999999999999999999999]',
      '["1"]',
      '[[1]]',
      '[1,]',
      '[1 2]',
      '[1,,2]',
      '[1,2',
      '[1,2 ',
      '[null]',
      '[true]',
      '{"a":1}',
      '1',
    ];
    for (const t of others) expect(jsonIdArray(Buffer.from(t), 0), t).toBeUndefined();
  });
});
