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

/** The fields of the block being read. */
interface Block {
  data: string | undefined;
  event: string | undefined;
  id: string | undefined;
}

/** One non-blank line (latin1, terminator excluded) as the spec reads it into `b`. */
function readLine(line: string, b: Block): void {
  if (line[0] === ':') return;
  const idx = line.indexOf(':');
  const name = idx < 0 ? line : line.slice(0, idx);
  let value = idx < 0 ? '' : line.slice(idx + 1);
  if (value.startsWith(' ')) value = value.slice(1);
  value = Buffer.from(value, 'latin1').toString('utf8');
  if (name === 'data') b.data = b.data === undefined ? value : `${b.data}\n${value}`;
  else if (name === 'event') b.event = value;
  else if (name === 'id' && !value.includes('\0')) b.id = value;
}

/** Whole-buffer reference of the same SSE rules, written for clarity rather than speed. */
function reference(input: Buffer): { events: Ev[]; discarded: number } {
  const s = input[0] === 0xef && input[1] === 0xbb && input[2] === 0xbf ? input.subarray(3) : input;
  const str = s.toString('latin1');
  const events: Ev[] = [];
  let pos = 0;
  let blockStart = 0;
  let b: Block = { data: undefined, event: undefined, id: undefined };
  for (;;) {
    const nl = str.indexOf('\n', pos);
    if (nl < 0) break;
    let line = str.slice(pos, nl);
    if (line.endsWith('\r')) line = line.slice(0, -1);
    if (line === '') {
      if (b.data !== undefined)
        events.push({ raw: s.subarray(blockStart, nl + 1).toString('latin1'), data: b.data, event: b.event, id: b.id });
      b = { data: undefined, event: undefined, id: undefined };
      blockStart = nl + 1;
    } else {
      readLine(line, b);
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

/** A stream of 5 to 64 pieces drawn from `pieces`. */
function randomStream(rng: () => number, pieces: readonly string[]): Buffer {
  const parts: string[] = [];
  const n = 5 + Math.floor(rng() * 60);
  for (let i = 0; i < n; i++) parts.push(pieces[Math.floor(rng() * pieces.length)]!);
  return Buffer.from(parts.join(''), 'utf8');
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

/** What the seeded random streams are made of: every field, line end and split the parser must get right. */
const RANDOM_PIECES: readonly string[] = [
  'data: ',
  'data:',
  ': c',
  'event: e',
  'id: 1',
  'x',
  '{"k":"✓"}',
  '[DONE]',
  '\n',
  '\r\n',
  '\n\n',
  '\r\n\r\n',
  'retry: 5',
];

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
    for (let round = 0; round < 300; round++) {
      const buf = randomStream(rng, RANDOM_PIECES);
      const ref = reference(buf);
      expect(parseChunks(randomChunks(buf, rng, 1 + Math.floor(rng() * 16)))).toEqual(ref);
    }
  });

  it('reads a large ASCII read (decoded once) like the reference, whole, split anywhere, and with a non-ASCII text', () => {
    const rng = mulberry32(0xa5c11);
    // The same pieces with an ASCII text: every read of these streams takes the parser's decode-once path.
    const pieces = RANDOM_PIECES.map((p) => p.replace('✓', 'v'));
    for (let round = 0; round < 100; round++) {
      const buf = Buffer.concat([randomStream(rng, pieces), randomStream(rng, pieces), randomStream(rng, pieces)]);
      const ref = reference(buf);
      expect(parseChunks([buf])).toEqual(ref);
      expect(parseChunks(splitAt(buf, [Math.floor(rng() * buf.length)]))).toEqual(ref);
    }
    const chunk = (text: string): string => `data: {"choices":[{"delta":{"content":"${text}"}}]}\n\n`;
    const ascii = Buffer.from(Array.from({ length: 64 }, (_, i) => chunk(`t${i}`)).join(''));
    expect(ascii.length).toBeGreaterThan(256);
    expect(parseChunks([ascii])).toEqual(reference(ascii));
    const mixed = Buffer.from(
      Array.from({ length: 64 }, (_, i) => chunk(i === 40 ? 'é✓日本' : `t${i}`)).join(''),
      'utf8',
    );
    const got = parseChunks([mixed]);
    expect(got).toEqual(reference(mixed));
    expect(got.events[40]!.data).toContain('é✓日本');
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
    expect(parseChunks([buf.subarray(0, 1), buf.subarray(1, 2), buf.subarray(2)]).events.map((e) => e.data)).toEqual([
      'x',
    ]);
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

/**
 * Issue 23 item 4: the spec's three line ends (WHATWG HTML, "event stream interpretation": CRLF, LF or a bare CR),
 * whole-buffer and written for clarity. `raw` is what the parser promises to forward: the exact block, or for a
 * block with a bare-CR line end a copy with every line end written as LF.
 */
function specReference(input: Buffer): { events: Ev[]; discarded: number } {
  const str = input.toString('latin1');
  const events: Ev[] = [];
  const eol = /\r\n|\r|\n/g;
  let pos = 0;
  let blockStart = 0;
  let bareCr = false;
  let b: Block = { data: undefined, event: undefined, id: undefined };
  for (let m = eol.exec(str); m !== null; m = eol.exec(str)) {
    const line = str.slice(pos, m.index);
    pos = m.index + m[0].length;
    if (m[0] === '\r') bareCr = true;
    if (line === '') {
      const block = str.slice(blockStart, pos);
      if (b.data !== undefined)
        events.push({ raw: bareCr ? block.replace(/\r\n|\r/g, '\n') : block, data: b.data, event: b.event, id: b.id });
      b = { data: undefined, event: undefined, id: undefined };
      bareCr = false;
      blockStart = pos;
    } else {
      readLine(line, b);
    }
  }
  return { events, discarded: input.length - blockStart };
}

/** Line ends as a client that splits on LF alone reads them: no CR that an LF does not follow. */
const hasBareCr = (raw: string): boolean => /\r(?!\n)/.test(raw);

describe('SseParser: CRLF, LF and CR line ends (issue 23 item 4)', () => {
  it('CR-only events are separate events, forwarded with LF line ends', () => {
    const got = parseChunks([Buffer.from('data: a\rdata: b\r\rdata: c\r\r')]);
    expect(got.events.map((e) => e.data)).toEqual(['a\nb', 'c']);
    expect(got.events.map((e) => e.raw)).toEqual(['data: a\ndata: b\n\n', 'data: c\n\n']);
    expect(got.discarded).toBe(0);
  });

  it('LF, CRLF and CR streams give the same events; LF and CRLF blocks are forwarded exactly', () => {
    const lines = ['event: e', 'id: 7', 'data: {"k":1}', 'data: two', ''];
    const parsed = ['\n', '\r\n', '\r'].map((end) => parseChunks([Buffer.from(lines.join(end) + end)]).events);
    for (const events of parsed)
      expect(events.map(({ data, event, id }) => ({ data, event, id }))).toEqual([
        { data: '{"k":1}\ntwo', event: 'e', id: '7' },
      ]);
    expect(parsed.map((events) => events[0]!.raw)).toEqual([
      lines.join('\n') + '\n',
      lines.join('\r\n') + '\r\n',
      lines.join('\n') + '\n',
    ]);
  });

  it('a CR ending one read and an LF starting the next are one CRLF, not two line ends', () => {
    // Two line ends would make a blank line between them, dispatching "x" and "y" apart.
    const got = parseChunks([Buffer.from('data: x\r'), Buffer.from('\ndata: y\r\n\r\n')]);
    expect(got.events).toEqual([{ raw: 'data: x\r\ndata: y\r\n\r\n', data: 'x\ny', event: undefined, id: undefined }]);
    // The blank line's CR ends a read: the event goes out at once; the LF of the next read belongs to no event.
    const events: string[] = [];
    const parser = new SseParser((raw, data) => events.push(`${data}|${raw.toString('latin1')}`));
    parser.push(Buffer.from('data: x\r\n\r'));
    expect(events).toEqual(['x|data: x\r\n\r\n']);
    parser.push(Buffer.from('\ndata: y\r\n\r\n'));
    expect(events).toEqual(['x|data: x\r\n\r\n', 'y|data: y\r\n\r\n']);
    expect(parser.end()).toBe(0);
  });

  it('gives the spec reference for every pair of split points of a stream mixing the three line ends', () => {
    const sample = Buffer.from(
      'data: a\rdata: ✓\r\r: c\r\rdata: b\r\n\r\nevent: e\rid: 1\rdata: d\r\rdata: f\n\ndata: 日\r\n\r\ndata: tail',
      'utf8',
    );
    const ref = specReference(sample);
    expect(ref.events.map((e) => e.data)).toEqual(['a\n✓', 'b', 'd', 'f', '日']);
    for (let i = 0; i <= sample.length; i++) {
      for (let j = i; j <= sample.length; j++) expect(parseChunks(splitAt(sample, [i, j]))).toEqual(ref);
    }
  });

  it('matches the spec reference under seeded random chunking; every forwarded event reads the same with LF alone', () => {
    const rng = mulberry32(0xc12);
    // The random pieces up to CRLF, then bare CRs.
    const pieces = [...RANDOM_PIECES.slice(0, 10), '\r', '\r\r', '\n\n', 'retry: 5'];
    for (let round = 0; round < 400; round++) {
      const buf = randomStream(rng, pieces);
      const ref = specReference(buf);
      const got = parseChunks(randomChunks(buf, rng, 1 + Math.floor(rng() * 16)));
      const fields = (r: { events: Ev[] }): unknown => r.events.map(({ data, event, id }) => ({ data, event, id }));
      expect(fields(got)).toEqual(fields(ref));
      expect(got.discarded).toBe(ref.discarded);
      got.events.forEach((e, i) => {
        expect(hasBareCr(e.raw)).toBe(false);
        // The same event, whatever line ends it was forwarded with (a blank-line CR ending a read may go out as CRLF).
        expect(fields(specReference(Buffer.from(e.raw, 'latin1')))).toEqual((fields(ref) as unknown[]).slice(i, i + 1));
        expect(e.raw.replace(/\r\n/g, '\n')).toBe(ref.events[i]!.raw.replace(/\r\n/g, '\n'));
      });
    }
  });

  it('an LF block stays a view of its read; a CR block is a copy', () => {
    const chunk = Buffer.from('data: {"a":1}\n\ndata: {"b":2}\r\r');
    const raws: Buffer[] = [];
    new SseParser((raw) => raws.push(raw)).push(chunk);
    expect(raws.map((r) => r.toString())).toEqual(['data: {"a":1}\n\n', 'data: {"b":2}\n\n']);
    chunk.fill(0x78); // a view sees the read change, a copy does not
    expect(raws.map((r) => r.toString())).toEqual(['x'.repeat(15), 'data: {"b":2}\n\n']);
  });
});

describe('SseParser: a stream cut inside an event (issue 23 item 3)', () => {
  const tail = (text: string, cut?: number): { partial: boolean; discarded: number } => {
    const parser = new SseParser(() => undefined);
    const buf = Buffer.from(text);
    for (const c of cut === undefined ? [buf] : splitAt(buf, [cut])) parser.push(c);
    const partial = parser.holdsPartialEvent;
    return { partial, discarded: parser.end() };
  };

  it('says whether the discarded tail was part of an event', () => {
    expect(tail('data: 1\n\ndata: {"choices":[{"te')).toEqual({ partial: true, discarded: 22 });
    expect(tail('data: 1\n\ndata: {"choices":[{"te', 12)).toEqual({ partial: true, discarded: 22 });
    expect(tail('data: 1\n\ndata: 2\n')).toEqual({ partial: true, discarded: 8 });
    expect(tail('data: 1\n\ndata: 2\r')).toEqual({ partial: true, discarded: 8 });
    expect(tail('data: 1\n\nevent: error\n')).toEqual({ partial: true, discarded: 13 });
    expect(tail('data: 1\n\nda')).toEqual({ partial: true, discarded: 2 });
    // Comments and the end of a finished event are not part of an event.
    expect(tail('data: 1\n\n: keep-alive')).toEqual({ partial: false, discarded: 12 });
    expect(tail('data: 1\n\n: keep-alive\n')).toEqual({ partial: false, discarded: 13 });
    expect(tail('data: 1\n\n')).toEqual({ partial: false, discarded: 0 });
    expect(tail('data: 1\r\r')).toEqual({ partial: false, discarded: 0 });
  });
});
