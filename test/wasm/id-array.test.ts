/**
 * A JSON array of token ids read from its bytes into a Uint32Array: exactly what JSON.parse reads for the plain form
 * (random arrays, JSON white space anywhere between tokens, the range's ends), and nothing for any other form, which
 * the caller then parses as JSON; checked against JSON.parse over random arrays, valid and broken (signs, fractions,
 * exponents, leading zeros, ten digits either side of 2^32, nested arrays, look-alike white space, a byte deleted or
 * inserted, cut short). Each result owns its buffer, whatever the reader reuses between calls.
 */
import { describe, expect, it } from 'vitest';
import { seededRng, type Rng } from '../../src/common/index.js';
import { jsonIdArray } from '../../src/wasm/index.js';

const SPACES = [' ', '\n', '\r', '\t'];

const pick = <T>(rnd: Rng, xs: readonly T[]): T => xs[Math.floor(rnd() * xs.length)]!;

/** Around the ends of each digit count, and of the range. */
const EDGE_IDS = [
  '0',
  '9',
  '10',
  '99999',
  '151643',
  '999999999',
  '1000000000',
  '429496729',
  '4294967290',
  '4294967295',
  '4294967296',
  '4294967299',
  '4294967300',
  '4294967305',
  '4300000000',
  '9999999999',
  '42949672950',
  '99999999999999999999999',
];

/** An element in any form: mostly a plain id, else one JSON.parse reads but the reader does not, or not JSON. */
function element(rnd: Rng): string {
  const id = String(Math.floor(rnd() * 2 ** (1 + rnd() * 31)));
  const r = rnd();
  if (r < 0.85) return rnd() < 0.1 ? pick(rnd, EDGE_IDS) : id;
  // Ten digits either side of 2^32.
  if (r < 0.9) return String(1e9 + Math.floor(rnd() * 9e9));
  return pick(rnd, [
    `0${id}`,
    `-${id}`,
    '-0',
    `${id}.0`,
    `${id}.5`,
    `${id}e3`,
    `${id}E-1`,
    `${id}e+0`,
    `[${id}]`,
    '[]',
    `"${id}"`,
    'null',
    'true',
    `${id}\f`,
    `${id}\u000b`,
    `${id}\u00a0`,
  ]);
}

/** JSON white space, sometimes a byte that only looks like it. */
function gap(rnd: Rng): string {
  if (rnd() < 0.7) return '';
  return rnd() < 0.97 ? pick(rnd, SPACES).repeat(1 + Math.floor(rnd() * 3)) : pick(rnd, ['\f', '\u000b', '\u00a0']);
}

/** A candidate array, then maybe broken: a byte deleted or inserted, cut short, or not an array at all. */
function candidate(rnd: Rng): string {
  const n = rnd() < 0.05 ? 2000 + Math.floor(rnd() * 20000) : 1 + Math.floor(rnd() * 40);
  const plain = rnd() < 0.5;
  const items = Array.from({ length: n }, () => (plain ? String(Math.floor(rnd() * 151644)) : element(rnd)));
  let text = `[${gap(rnd)}${items.map((x) => `${x}${gap(rnd)}`).join(`,${gap(rnd)}`)}]`;
  const at = Math.floor(rnd() * text.length);
  const r = rnd();
  if (r < 0.1) text = text.slice(0, at) + text.slice(at + 1);
  else if (r < 0.2) text = text.slice(0, at) + pick(rnd, [...',[]0123456789 -.eE', '\t']) + text.slice(at);
  else if (r < 0.3) text = text.slice(0, at);
  else if (r < 0.33) text = pick(rnd, ['{"a":[1]}', '1', '"[1]"', 'null', ' [1]']);
  return text;
}

/**
 * What the reader must answer, from JSON.parse: a plain id array ends at its first `]` (it nests nothing), holds
 * only digits, commas and JSON white space, and parses to a non-empty array of integers from 0 to 2^32 - 1.
 * Anything else is no array of ids, whatever JSON.parse makes of it.
 */
function expected(bytes: Buffer, start: number): { ids: number[]; end: number } | undefined {
  const text = bytes.toString('latin1');
  const close = text.indexOf(']', start);
  if (text[start] !== '[' || close < 0) return undefined;
  const slice = text.slice(start, close + 1);
  if (!/^\[[0-9,\t\n\r ]*\]$/.test(slice)) return undefined;
  let parsed: unknown;
  try {
    parsed = JSON.parse(slice);
  } catch {
    return undefined;
  }
  if (!Array.isArray(parsed) || parsed.length === 0) return undefined;
  if (!parsed.every((x) => Number.isInteger(x) && x >= 0 && x <= 0xffffffff)) return undefined;
  return { ids: parsed as number[], end: close + 1 };
}

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

  it('answers exactly what JSON.parse implies for random arrays, valid and broken, at any place in a body', () => {
    const rnd = seededRng(29);
    let read = 0;
    for (let round = 0; round < 3000; round++) {
      const prefix = pick(rnd, ['', '{"prompt":', '{"model":"m", "prompt": ']);
      const suffix = pick(rnd, ['', '}', ',"max_tokens":1}', ' ]', '1']);
      const bytes = Buffer.from(prefix + candidate(rnd) + suffix, 'latin1');
      const want = expected(bytes, prefix.length);
      const got = jsonIdArray(bytes, prefix.length);
      const seen = got === undefined ? undefined : { ids: [...got.ids], end: got.end };
      expect(seen, bytes.toString('latin1').slice(0, 120)).toEqual(want);
      if (got !== undefined) read++;
    }
    // Both answers well represented.
    expect(read).toBeGreaterThan(900);
    expect(read).toBeLessThan(2400);
  });

  it('gives each result its own buffer: a later read, longer or shorter, leaves an earlier one as it was', () => {
    const long = Array.from({ length: 30000 }, (_, i) => (i * 7919) % 151644);
    const first = jsonIdArray(Buffer.from(JSON.stringify(long)), 0)!;
    const second = jsonIdArray(Buffer.from('[5,6,7]'), 0)!;
    const third = jsonIdArray(Buffer.from(JSON.stringify(long.map((x) => x + 1))), 0)!;
    expect([...first.ids]).toEqual(long);
    expect([...second.ids]).toEqual([5, 6, 7]);
    expect(third.ids[0]).toBe(1);
    // Past what the module's I/O region held (it grows), then a short one again.
    const huge = Array.from({ length: 1_200_000 }, (_, i) => i % 10);
    const fourth = jsonIdArray(Buffer.from(JSON.stringify(huge)), 0)!;
    const fifth = jsonIdArray(Buffer.from('[8]'), 0)!;
    expect(fourth.ids.length).toBe(huge.length);
    expect(fourth.ids.every((id, i) => id === huge[i])).toBe(true);
    expect([...fifth.ids]).toEqual([8]);
    for (const r of [first, second, third, fourth]) expect(r.ids.byteLength).toBe(r.ids.buffer.byteLength);
  });
});
