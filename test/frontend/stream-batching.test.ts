/**
 * Issue 18 (gateway cost per request): SSE events that are ready together
 * leave in one chunked-encoding chunk (one write), not one chunk each; events
 * that come apart still go out at once, and the head is not held back waiting
 * for a first event.
 */
import { connect } from 'node:net';
import { describe, expect, it } from 'vitest';
import { chat, start } from './server-harness.js';

/** Sends one raw HTTP request; resolves with the head and the sizes of the body's chunks, once `done` says so. */
function rawStream(
  url: string,
  body: string,
  done: (text: string) => boolean,
): Promise<{ head: string; chunks: string[] }> {
  const { port } = new URL(url);
  return new Promise((resolve, reject) => {
    const sock = connect(Number(port), '127.0.0.1');
    let text = '';
    sock.setEncoding('latin1');
    sock.on('data', (d: string) => {
      text += d;
      if (!done(text)) return;
      sock.destroy();
      const at = text.indexOf('\r\n\r\n');
      const chunks: string[] = [];
      let rest = text.slice(at + 4);
      for (;;) {
        const eol = rest.indexOf('\r\n');
        const size = eol < 0 ? 0 : parseInt(rest.slice(0, eol), 16);
        if (!(size > 0) || rest.length < eol + 2 + size) break;
        chunks.push(rest.slice(eol + 2, eol + 2 + size));
        rest = rest.slice(eol + 2 + size + 2);
      }
      resolve({ head: text.slice(0, at), chunks });
    });
    sock.on('error', reject);
    sock.write(
      `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
    );
  });
}

describe('SSE writes are batched per event-loop turn (issue 18)', () => {
  it('a stream whose events are all ready at once is one chunk holding every event, in order', async () => {
    const g = await start();
    g.routers.demo.streamWords = Array.from({ length: 64 }, (_, i) => ` w${i}`);
    const { head, chunks } = await rawStream(g.url, JSON.stringify(chat('batch me', { stream: true })), (t) =>
      t.endsWith('0\r\n\r\n'),
    );
    expect(head).toMatch(/^HTTP\/1\.1 200/);
    expect(head.toLowerCase()).toContain('content-type: text/event-stream');
    // Before batching: 66 chunks (64 words, the usage event, [DONE]).
    expect(chunks.length).toBe(1);
    const events = chunks
      .join('')
      .split('\n\n')
      .filter((e) => e !== '');
    expect(events).toHaveLength(66);
    expect(events.at(-1)).toBe('data: [DONE]');
    const words = events
      .slice(0, 64)
      .map(
        (e) =>
          (JSON.parse(e.slice('data: '.length)) as { choices: { delta: { content: string } }[] }).choices[0]!.delta
            .content,
      );
    expect(words).toEqual(g.routers.demo.streamWords);
  });

  it('events passed through as views of one read with a gap go out as one view per run, uncopied and in order', async () => {
    const g = await start();
    // One upstream read of five events; the third is not passed on (as a dropped usage chunk is not).
    const frames = [
      'data: {"a":1}\n\n',
      'data: {"b":2}\n\n',
      'data: {"dropped":3}\n\n',
      'data: {"c":4}\n\n',
      'data: [DONE]\n\n',
    ];
    const read = Buffer.from(frames.join(''));
    const views: Buffer[] = [];
    let at = 0;
    for (const f of frames) {
      views.push(read.subarray(at, at + f.length));
      at += f.length;
    }
    g.routers.demo.rawEvents = [0, 1, 3, 4].map((i) => ({ raw: views[i]!, data: frames[i]!.slice(6, -2) }));
    const { chunks } = await rawStream(g.url, JSON.stringify(chat('runs', { stream: true })), (t) =>
      t.endsWith('0\r\n\r\n'),
    );
    expect(chunks).toEqual([frames[0]! + frames[1]!, frames[3]! + frames[4]!]);
  });

  it('the head and the first event go out without waiting for the rest of a held stream', async () => {
    const g = await start();
    g.routers.demo.hold();
    const got = await rawStream(g.url, JSON.stringify(chat('hold after one', { stream: true })), (t) =>
      t.includes('Hello'),
    );
    expect(got.head).toMatch(/^HTTP\/1\.1 200/);
    g.routers.demo.release();
  });
});
