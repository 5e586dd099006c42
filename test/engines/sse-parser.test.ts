import { describe, expect, it } from 'vitest';
import { SseParser } from '../../src/engines/index.js';
import { isKvgateError } from '../../src/errors/index.js';
import { mulberry32 } from '../helpers/rng.js';

interface Ev {
  raw: string;
  data: string;
  event: string | undefined;
  id: string | undefined;
}

/** Whole-buffer reference of the same SSE rules, written for clarity rather than speed. */
function reference(input: Buffer): { events: Ev[]; discarded: number } {
  const s = input[0] === 0xef && input[1] === 0xbb && input[2] === 0xbf ? input.subarray(3) : input;
  const str = s.toString('latin1');
  const events: Ev[] = [];
  let pos = 0;
  let blockStart = 0;
  let data: string | undefined;
  let event: string | undefined;
  let id: string | undefined;
  for (;;) {
    const nl = str.indexOf('\n', pos);
    if (nl < 0) break;
    let line = str.slice(pos, nl);
    if (line.endsWith('\r')) line = line.slice(0, -1);
    if (line === '') {
      if (data !== undefined) events.push({ raw: s.subarray(blockStart, nl + 1).toString('latin1'), data, event, id });
      data = event = id = undefined;
      blockStart = nl + 1;
    } else if (line[0] !== ':') {
      const idx = line.indexOf(':');
      const name = idx < 0 ? line : line.slice(0, idx);
      let value = idx < 0 ? '' : line.slice(idx + 1);
      if (value.startsWith(' ')) value = value.slice(1);
      value = Buffer.from(value, 'latin1').toString('utf8');
      if (name === 'data') data = data === undefined ? value : `${data}\n${value}`;
      else if (name === 'event') event = value;
      else if (name === 'id' && !value.includes('\0')) id = value;
    }
    pos = nl + 1;
  }
  return { events, discarded: s.length - blockStart };
}

function parseChunks(chunks: Uint8Array[], maxEventBytes?: number): { events: Ev[]; discarded: number } {
  const events: Ev[] = [];
  const parser = new SseParser(
    (raw, data, event, id) => events.push({ raw: raw.toString('latin1'), data, event, id }),
    maxEventBytes === undefined ? {} : { maxEventBytes },
  );
  for (const c of chunks) parser.push(c);
  return { events, discarded: parser.end() };
}

function splitAt(buf: Buffer, cuts: number[]): Buffer[] {
  const out: Buffer[] = [];
  let prev = 0;
  for (const c of [...cuts].sort((a, b) => a - b)) {
    out.push(buf.subarray(prev, c));
    prev = c;
  }
  out.push(buf.subarray(prev));
  return out;
}

function randomChunks(buf: Buffer, rng: () => number, maxChunk: number): Buffer[] {
  const out: Buffer[] = [];
  let pos = 0;
  while (pos < buf.length) {
    const n = 1 + Math.floor(rng() * maxChunk);
    out.push(buf.subarray(pos, pos + n));
    pos += n;
  }
  return out;
}

const ADVERSARIAL = Buffer.concat([
  Buffer.from([0xef, 0xbb, 0xbf]),
  Buffer.from(
    [
      ': keep-alive comment\n\n',
      'data: {"id":"a","choices":[{"text":"héllo ✓ 日本"}]}\n\n',
      'data: line one\r\ndata: line two\r\n\r\n',
      'event: error\ndata:{"error":"boom"}\nid: 7\n\n',
      'data\n\n',
      'data:  two leading spaces\n\n',
      'retry: 1000\nfoo: bar\ndata: after unknown fields\n\n',
      ': comment\ndata: with comment in block\n\n',
      'id: only-id-no-data\n\n',
      'data: [DONE]\n\n',
      'data: unterminated tail',
    ].join(''),
    'utf8',
  ),
]);

describe('SseParser', () => {
  it('parses a whole stream like the reference (one chunk)', () => {
    const ref = reference(ADVERSARIAL);
    const got = parseChunks([ADVERSARIAL]);
    expect(got).toEqual(ref);
    expect(ref.events.map((e) => e.data)).toEqual([
      '{"id":"a","choices":[{"text":"héllo ✓ 日本"}]}',
      'line one\nline two',
      '{"error":"boom"}',
      '',
      ' two leading spaces',
      'after unknown fields',
      'with comment in block',
      '[DONE]',
    ]);
    expect(ref.events[2]).toMatchObject({ event: 'error', id: '7' });
    expect(got.discarded).toBe(Buffer.byteLength('data: unterminated tail'));
  });

  it('gives identical results for every single split point and 1-byte chunks', () => {
    const ref = reference(ADVERSARIAL);
    for (let cut = 0; cut <= ADVERSARIAL.length; cut++) {
      expect(parseChunks(splitAt(ADVERSARIAL, [cut]))).toEqual(ref);
    }
    const bytes = [...ADVERSARIAL].map((b) => Uint8Array.of(b)); // plain Uint8Array, not Buffer
    expect(parseChunks(bytes)).toEqual(ref);
  });

  it('gives identical results for every pair of split points around CRLF and multi-byte characters', () => {
    const sample = Buffer.from('data: a✓b\r\n\r\ndata: 日本\r\ndata: x\r\n\r\n', 'utf8');
    const ref = reference(sample);
    for (let i = 0; i <= sample.length; i++) {
      for (let j = i; j <= sample.length; j++) expect(parseChunks(splitAt(sample, [i, j]))).toEqual(ref);
    }
  });

  it('matches the reference under seeded random chunking of generated streams', () => {
    const rng = mulberry32(0x5eed);
    const pieces = ['data: ', 'data:', ': c', 'event: e', 'id: 1', 'x', '{"k":"✓"}', '[DONE]', '\n', '\r\n', '\n\n', '\r\n\r\n', 'retry: 5'];
    for (let round = 0; round < 300; round++) {
      const parts: string[] = [];
      const n = 5 + Math.floor(rng() * 60);
      for (let i = 0; i < n; i++) parts.push(pieces[Math.floor(rng() * pieces.length)]!);
      const buf = Buffer.from(parts.join(''), 'utf8');
      const ref = reference(buf);
      expect(parseChunks(randomChunks(buf, rng, 1 + Math.floor(rng() * 16)))).toEqual(ref);
    }
  });

  it('returns raw views of the input chunk when an event does not span chunks', () => {
    const chunk = Buffer.from('data: {"a":1}\n\ndata: {"b":2}\n\n');
    const raws: Buffer[] = [];
    new SseParser((raw) => raws.push(raw)).push(chunk);
    expect(raws.map((r) => r.toString())).toEqual(['data: {"a":1}\n\n', 'data: {"b":2}\n\n']);
    expect(raws[0]!.buffer).toBe(chunk.buffer);
    expect(raws[1]!.byteOffset).toBe(chunk.byteOffset + 15);
  });

  it('handles a BOM split across the first chunks', () => {
    const buf = Buffer.from('\ufeffdata: x\n\n', 'utf8');
    expect(parseChunks([buf.subarray(0, 1), buf.subarray(1, 2), buf.subarray(2)]).events.map((e) => e.data)).toEqual(['x']);
    expect(parseChunks([Buffer.from([0xef]), Buffer.from('data: y\n\n')]).events).toEqual([]);
  });

  it('rejects an event larger than maxEventBytes, in one chunk or many', () => {
    const big = Buffer.from(`data: ${'x'.repeat(100)}\n\n`);
    const check = (chunks: Buffer[]): void => {
      let caught: unknown;
      try {
        parseChunks(chunks, 64);
      } catch (err) {
        caught = err;
      }
      expect(isKvgateError(caught, 'KVG_ERR_ENGINE_BAD_RESPONSE')).toBe(true);
    };
    check([big]);
    check(randomChunks(big, mulberry32(3), 7));
    expect(parseChunks([big], 200).events).toHaveLength(1);
  });
});
