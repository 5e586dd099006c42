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
import { readBodyText } from '../../src/frontend/body.js';

afterEach(() => {
  vi.restoreAllMocks();
});

function fakeRequest(): PassThrough & IncomingMessage {
  return Object.assign(new PassThrough(), { headers: {} }) as unknown as PassThrough & IncomingMessage;
}

describe('readBodyText', () => {
  it('a body in a hundred chunks arms one timer and reads whole', async () => {
    const spy = vi.spyOn(globalThis, 'setTimeout');
    const req = fakeRequest();
    const text = readBodyText(req, { maxBodyBytes: 1 << 20, bodyTimeoutMs: 10_000 }, new AbortController().signal);
    for (let i = 0; i < 100; i++) req.write(`${i},`);
    req.end();
    expect(await text).toBe(Array.from({ length: 100 }, (_, i) => `${i},`).join(''));
    expect(spy.mock.calls.length).toBe(1);
  });

  it('a body that pauses longer than allowed after some chunks is cut at that pause', async () => {
    const req = fakeRequest();
    const started = performance.now();
    const text = readBodyText(req, { maxBodyBytes: 1 << 20, bodyTimeoutMs: 60 }, new AbortController().signal);
    let last = started;
    // Chunks every 10 ms for 150 ms (longer than the pause allowed), then silence.
    while (performance.now() - started < 150) {
      await new Promise((r) => setTimeout(r, 10));
      req.write('x');
      last = performance.now();
    }
    const err = await text.then(() => undefined, (e: unknown) => e);
    expect(isKvgateError(err, 'KVG_ERR_CLIENT_TIMEOUT')).toBe(true);
    expect(performance.now() - last).toBeGreaterThanOrEqual(59);
  });
});
