/**
 * How a stream that fails after it began ends, in each API's own error event (respond.ts): the Responses API's
 * `error` event (`event: error`, `type: "error"`, the code, `sequence_number` after the events relayed), which
 * Codex and the SDKs dispatch on by `type`; Anthropic's `event: error` on Messages.
 */
import { describe, expect, it } from 'vitest';
import { start } from './server-harness.js';

/** The SSE events of a stream's text: [event name or undefined, parsed data]. */
function events(text: string): [string | undefined, Record<string, unknown>][] {
  return text
    .split('\n\n')
    .filter((e) => e.trim() !== '')
    .map((e) => {
      const name = /^event: (.*)$/m.exec(e)?.[1];
      const data = /^data: (.*)$/m.exec(e)![1]!;
      return [name, data === '[DONE]' ? {} : (JSON.parse(data) as Record<string, unknown>)];
    });
}

describe('a stream that fails mid-way ends in its API error event', () => {
  it("Responses: the API's error event, numbered after the events relayed, with kvgate's code", async () => {
    const g = await start();
    g.routers.demo.failAfter = 2;
    const r = await fetch(`${g.url}/v1/responses`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'demo', input: 'hi', stream: true }),
    });
    expect(r.status).toBe(200);
    const got = events(await r.text());
    expect(got).toHaveLength(3);
    expect(got[2]).toEqual([
      'error',
      {
        type: 'error',
        code: 'KVG_ERR_ENGINE_STREAM_BROKEN',
        message: expect.stringContaining('KVG_ERR_ENGINE_STREAM_BROKEN'),
        param: null,
        sequence_number: 2,
      },
    ]);
  });

  it("Messages: Anthropic's error event", async () => {
    const g = await start();
    g.routers.demo.failAfter = 2;
    const r = await fetch(`${g.url}/v1/messages`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'demo', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }], stream: true }),
    });
    const got = events(await r.text());
    expect(got.at(-1)).toEqual([
      'error',
      expect.objectContaining({
        type: 'error',
        error: expect.objectContaining({ code: 'KVG_ERR_ENGINE_STREAM_BROKEN' }),
      }),
    ]);
  });
});
