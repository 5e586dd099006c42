/**
 * A worker leaving while it streams: the stream opened before, its first
 * chunk read, then the rest read to the end after the leave (tests of
 * reloads and discovery sources assert it finished cleanly).
 */
import { expect } from 'vitest';

/** Reads `res`'s first SSE chunk; `finish()` reads the rest and checks it ended with [DONE] and no error. */
export async function openStream(res: Response): Promise<{ finish(): Promise<void> }> {
  const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
  let streamed = (await reader.read()).value ?? '';
  expect(streamed).toContain('data: ');
  return {
    async finish() {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        streamed += value;
      }
      expect(streamed).toContain('data: [DONE]');
      expect(streamed).not.toContain('"error"');
    },
  };
}

/** Sends `n` requests with `send` and expects each served by worker `id` (the x-kvgate-worker header). */
export async function expectServedBy(send: () => Promise<Response>, id: string, n = 4): Promise<void> {
  for (let i = 0; i < n; i++) {
    const r = await send();
    expect(r.headers.get('x-kvgate-worker')).toBe(id);
    await r.arrayBuffer();
  }
}
