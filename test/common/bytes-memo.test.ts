/**
 * The bounded memo a request's tools text is read through (python-json.ts): a value only for equal bytes, and no
 * more entries or bytes than its bounds, least recently used going first.
 */
import { describe, expect, it } from 'vitest';
import { BytesMemo } from '../../src/common/bytes-memo.js';

const text = (s: string): Buffer => Buffer.from(s);

describe('BytesMemo', () => {
  it('answers what was set for equal bytes, from a copy of them, and nothing for other bytes', () => {
    const memo = new BytesMemo<string>(4, 1 << 20);
    const key = text('[{"name": "f", "minimum": 0}]');
    memo.set(key, 'answer');
    expect(memo.get(text('[{"name": "f", "minimum": 0}]'))).toBe('answer');
    expect(memo.get(text('[{"name": "f", "minimum": 1}]'))).toBeUndefined();
    key[0] = 0x7b; // the caller's bytes change: the memo kept its own
    expect(memo.get(key)).toBeUndefined();
    expect(memo.get(text('[{"name": "f", "minimum": 0}]'))).toBe('answer');
  });

  it('tells apart bytes of one length whose sampled bytes agree (compared whole)', () => {
    const memo = new BytesMemo<number>(4, 1 << 20);
    const a = Buffer.alloc(256 * 8, 0x20); // sampled every 8th byte: byte 1 is not sampled
    const b = Buffer.from(a);
    b[1] = 0x31;
    memo.set(a, 1);
    expect(memo.get(b)).toBeUndefined();
    memo.set(b, 2); // its hash twin is replaced
    expect(memo.get(b)).toBe(2);
    expect(memo.get(a)).toBeUndefined();
    expect(memo.size.entries).toBe(1);
  });

  it('holds at most maxEntries, the least recently used going first', () => {
    const memo = new BytesMemo<number>(3, 1 << 20);
    for (let i = 0; i < 3; i++) memo.set(text(`tools ${i}`), i);
    expect(memo.get(text('tools 0'))).toBe(0); // now the most recent
    memo.set(text('tools 3'), 3);
    expect(memo.size.entries).toBe(3);
    expect(memo.get(text('tools 1'))).toBeUndefined();
    expect([0, 2, 3].map((i) => memo.get(text(`tools ${i}`)))).toEqual([0, 2, 3]);
  });

  it("holds at most maxBytes of keys and values' sizes, and keeps no entry larger alone", () => {
    const memo = new BytesMemo<string>(64, 1000);
    for (let i = 0; i < 10; i++) memo.set(Buffer.alloc(200, 0x30 + i), `v${i}`, 100);
    expect(memo.size).toEqual({ entries: 3, bytes: 900 });
    expect(memo.get(Buffer.alloc(200, 0x39))).toBe('v9');
    expect(memo.get(Buffer.alloc(200, 0x36))).toBeUndefined();
    memo.set(Buffer.alloc(1001, 0x41), 'too large');
    expect(memo.get(Buffer.alloc(1001, 0x41))).toBeUndefined();
    expect(memo.size.entries).toBe(3);
    // Setting the same bytes again replaces their entry, counted once.
    memo.set(Buffer.alloc(200, 0x39), 'again', 100);
    expect(memo.size).toEqual({ entries: 3, bytes: 900 });
    expect(memo.get(Buffer.alloc(200, 0x39))).toBe('again');
  });
});
