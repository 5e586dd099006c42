/**
 * Reading a request body keeps one timer for the pause allowed between
 * chunks: a chunk moves the deadline, the timer sleeps again for what is
 * left, and a body that stops is still cut with KVG_ERR_CLIENT_TIMEOUT
 * (issue 18, round 2: no timer per chunk).
 */
import type { IncomingMessage } from 'node:http';
import { PassThrough } from 'node:stream';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { isKvgateError } from '../../src/errors/index.js';
import { bodyText, parseBodyObject, readBodyBytes, readBodyText } from '../../src/frontend/body.js';

afterEach(() => {
  vi.restoreAllMocks();
});

function fakeRequest(headers: Record<string, string> = {}): PassThrough & IncomingMessage {
  return Object.assign(new PassThrough(), { headers }) as unknown as PassThrough & IncomingMessage;
}

const LIMITS = { maxBodyBytes: 1 << 22, bodyTimeoutMs: 10_000, bodyDeadlineMs: 60_000 };

/** `n` bytes of a seeded pattern, cut into chunks of seeded sizes. */
function chunksOf(n: number, seed: number): Buffer[] {
  let s = seed;
  const rnd = (): number => (s = (Math.imul(s, 1103515245) + 12345) >>> 0) / 2 ** 32;
  const all = Buffer.alloc(n);
  for (let i = 0; i < n; i++) all[i] = Math.floor(rnd() * 256);
  const out: Buffer[] = [];
  for (let at = 0; at < n;) {
    const len = Math.min(n - at, 1 + Math.floor(rnd() * 70_000));
    out.push(Buffer.from(all.subarray(at, at + len)));
    at += len;
  }
  return out;
}

describe('readBodyText', () => {
  it('a body in a hundred chunks arms one timer and reads whole', async () => {
    const spy = vi.spyOn(globalThis, 'setTimeout');
    const req = fakeRequest();
    const text = readBodyText(
      req,
      { maxBodyBytes: 1 << 20, bodyTimeoutMs: 10_000, bodyDeadlineMs: 60_000 },
      new AbortController().signal,
    );
    for (let i = 0; i < 100; i++) req.write(`${i},`);
    req.end();
    expect(await text).toBe(Array.from({ length: 100 }, (_, i) => `${i},`).join(''));
    expect(spy.mock.calls.length).toBe(1);
  });

  it('a body that pauses longer than allowed after some chunks is cut at that pause', async () => {
    const req = fakeRequest();
    const started = performance.now();
    const text = readBodyText(
      req,
      { maxBodyBytes: 1 << 20, bodyTimeoutMs: 60, bodyDeadlineMs: 60_000 },
      new AbortController().signal,
    );
    let last = started;
    // Chunks every 10 ms for 150 ms (longer than the pause allowed), then silence.
    while (performance.now() - started < 150) {
      await new Promise((r) => setTimeout(r, 10));
      req.write('x');
      last = performance.now();
    }
    const err = await text.then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(isKvgateError(err, 'KVG_ERR_CLIENT_TIMEOUT')).toBe(true);
    expect(performance.now() - last).toBeGreaterThanOrEqual(59);
  });

  it('a body that keeps trickling is cut at limits.body_deadline_ms, however short its pauses (issue 23)', async () => {
    const req = fakeRequest();
    const started = performance.now();
    const text = readBodyText(
      req,
      { maxBodyBytes: 1 << 20, bodyTimeoutMs: 60, bodyDeadlineMs: 200 },
      new AbortController().signal,
    );
    const trickle = setInterval(() => req.write('x'), 10);
    const err = await text.then(
      () => undefined,
      (e: unknown) => e,
    );
    clearInterval(trickle);
    expect(isKvgateError(err, 'KVG_ERR_CLIENT_TIMEOUT')).toBe(true);
    expect((err as Error).message).toBe('the request body did not arrive within 200 ms');
    expect(performance.now() - started).toBeGreaterThanOrEqual(199);
  });

  it('a leading UTF-8 byte order mark is skipped (as vLLM does); two are invalid JSON', async () => {
    const bom = Buffer.from([0xef, 0xbb, 0xbf]);
    const one = fakeRequest();
    const text = readBodyText(
      one,
      { maxBodyBytes: 1 << 20, bodyTimeoutMs: 1000, bodyDeadlineMs: 1000 },
      new AbortController().signal,
    );
    one.end(Buffer.concat([bom, Buffer.from('{"a":1}')]));
    expect(await text).toBe('{"a":1}');
    const two = fakeRequest();
    const rejected = readBodyText(
      two,
      { maxBodyBytes: 1 << 20, bodyTimeoutMs: 1000, bodyDeadlineMs: 1000 },
      new AbortController().signal,
    );
    two.end(Buffer.concat([bom, bom, Buffer.from('{"a":1}')]));
    const err = await rejected.then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(isKvgateError(err, 'KVG_ERR_INVALID_JSON')).toBe(true);
    expect((err as Error).message).toMatch(/two byte order marks; JSON allows none/);
  });
});

describe('parseBodyObject: the nesting bound', () => {
  const nested = (levels: number): string => `{"a": ${'['.repeat(levels - 1)}${']'.repeat(levels - 1)}}`;
  const codeOf = (text: string): string | undefined => {
    try {
      parseBodyObject(text);
      return undefined;
    } catch (err) {
      return isKvgateError(err) ? `${err.code}: ${err.message}` : String(err);
    }
  };

  it('100 levels parse; 101 are refused for their depth, valid JSON or not', () => {
    expect(codeOf(nested(100))).toBeUndefined();
    expect(codeOf(nested(101))).toMatch(/^KVG_ERR_INVALID_REQUEST: .*deeper than 100 levels/);
    // Invalid JSON that is also too deep: the depth is named first, as before the parse.
    expect(codeOf(`${nested(101)},`)).toMatch(/^KVG_ERR_INVALID_REQUEST: .*deeper than 100 levels/);
    expect(codeOf(`${'['.repeat(5000)}`)).toMatch(/^KVG_ERR_INVALID_REQUEST/);
    // A shallow invalid body is invalid JSON; a deep array at the top is too deep rather than "not an object".
    expect(codeOf(`${nested(3)},`)).toMatch(/^KVG_ERR_INVALID_JSON/);
    expect(codeOf(`${'['.repeat(200)}${']'.repeat(200)}`)).toMatch(/^KVG_ERR_INVALID_REQUEST/);
  });

  it('brackets inside strings are text, and depth counts objects and arrays alike', () => {
    expect(codeOf(`{"a": "${'[{'.repeat(500)}"}`)).toBeUndefined();
    const mixed = `{"a": ${'{"b": ['.repeat(50)}${']}'.repeat(50)}}`; // 1 + 100 levels
    expect(codeOf(mixed)).toMatch(/deeper than 100 levels/);
  });
});

describe('bodyText of a large body', () => {
  const reference = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });
  const big = (unit: string): string => JSON.stringify({ content: unit.repeat(Math.ceil(20_000 / unit.length)) });
  const errorOf = (bytes: Uint8Array): string | undefined => {
    try {
      bodyText(bytes);
      return undefined;
    } catch (err) {
      return isKvgateError(err) ? err.code : String(err);
    }
  };

  it('is the text the UTF-8 decoder gives, for ASCII, Latin-1, CJK and astral characters, a byte order mark skipped', () => {
    for (const unit of [
      'plain ascii ',
      'ünïcödé ',
      '日本語のテキスト ',
      'emoji 😀🚀 and 𝔘 ',
      'mixed é 日 😀 \u0000 ',
    ]) {
      const bytes = Buffer.from(big(unit));
      expect(bytes.length).toBeGreaterThan(16_384);
      expect(bodyText(bytes)).toBe(reference.decode(bytes));
      // A slice of a larger buffer (a body inside a pooled allocation) reads only its own bytes.
      const inner = Buffer.concat([Buffer.from('xx'), bytes, Buffer.from('yy')]).subarray(2, 2 + bytes.length);
      expect(bodyText(inner)).toBe(reference.decode(bytes));
      const withBom = Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), bytes]);
      expect(bodyText(withBom)).toBe(reference.decode(bytes));
      expect(errorOf(Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf, 0xef, 0xbb, 0xbf]), bytes]))).toBe(
        'KVG_ERR_INVALID_JSON',
      );
    }
  });

  it('refuses what is not UTF-8 as KVG_ERR_INVALID_JSON, as the decoder does', () => {
    const body = Buffer.from(big('日本語 text '));
    const bad = [
      [0xc0, 0xaf], // overlong
      [0xed, 0xa0, 0x80], // an encoded surrogate
      [0xf4, 0x90, 0x80, 0x80], // over U+10FFFF
      [0xff],
      [0xe6, 0x97], // truncated, at the end
    ];
    for (const seq of bad) {
      const bytes = Buffer.concat([body, Buffer.from(seq)]);
      expect(() => reference.decode(bytes)).toThrow();
      expect(errorOf(bytes)).toBe('KVG_ERR_INVALID_JSON');
      const ascii = Buffer.concat([Buffer.from(big('plain ')), Buffer.from(seq)]);
      expect(errorOf(ascii)).toBe('KVG_ERR_INVALID_JSON');
    }
  });
});

describe('readBodyBytes: a body that declares its length', () => {
  it('is read whole into one buffer of that length that owns its memory, so it can move to a thread', async () => {
    const chunks = chunksOf(300_000, 7);
    expect(chunks.length).toBeGreaterThan(4);
    const req = fakeRequest({ 'content-length': '300000' });
    const read = readBodyBytes(req, LIMITS, new AbortController().signal);
    for (const c of chunks) req.write(c);
    req.end();
    const bytes = await read;
    expect(bytes.equals(Buffer.concat(chunks))).toBe(true);
    expect(bytes.byteOffset).toBe(0);
    expect(bytes.buffer).toBeInstanceOf(ArrayBuffer);
    expect(bytes.buffer.byteLength).toBe(300_000);
    const moved = structuredClone(bytes, { transfer: [bytes.buffer as ArrayBuffer] });
    expect(moved.byteLength).toBe(300_000);
    expect(bytes.byteLength).toBe(0);
  });

  it('keeps every byte that arrived, in order, when more or fewer arrive than declared', async () => {
    const chunks = chunksOf(200_000, 11);
    const whole = Buffer.concat(chunks);
    for (const declared of ['100000', '250000', '200000']) {
      const req = fakeRequest({ 'content-length': declared });
      const read = readBodyBytes(req, LIMITS, new AbortController().signal);
      for (const c of chunks) req.write(c);
      req.end();
      expect((await read).equals(whole)).toBe(true);
    }
  });

  it('over the limit, is refused with KVG_ERR_BODY_TOO_LARGE before any buffer of that length is taken', async () => {
    const req = fakeRequest({ 'content-length': String(LIMITS.maxBodyBytes + 1) });
    const read = readBodyBytes(req, { ...LIMITS, bodyTimeoutMs: 50 }, new AbortController().signal);
    const spy = vi.spyOn(Buffer, 'allocUnsafeSlow');
    req.write(Buffer.alloc(70_000));
    req.end();
    const err = await read.then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(isKvgateError(err, 'KVG_ERR_BODY_TOO_LARGE')).toBe(true);
    expect(spy).not.toHaveBeenCalled();
  });
});
