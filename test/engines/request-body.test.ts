/**
 * The body sent to an engine: routing fields that add members are written
 * after the client's serialised body (no copy of it), with exactly the bytes
 * the merged object serialises to; fields that replace or remove a member go
 * through the merged copy (issue 18, round 2: fewer copies of the client body).
 */
import { describe, expect, it } from 'vitest';
import { rememberJsonText } from '../../src/common/index.js';
import { serializeBody } from '../../src/engines/request-body.js';

/** What the engine must receive: the merged object, bigints as exact integers after the other members. */
function expected(body: Record<string, unknown>, extra: Record<string, unknown>): string {
  const merged: Record<string, unknown> = { ...body };
  const bigints: string[] = [];
  for (const [k, v] of Object.entries(extra)) {
    if (typeof v === 'bigint') {
      merged[k] = undefined;
      bigints.push(`${JSON.stringify(k)}:${v.toString()}`);
    } else {
      merged[k] = v;
    }
  }
  const json = JSON.stringify(merged);
  if (bigints.length === 0) return json;
  return json === '{}' ? `{${bigints.join(',')}}` : `${json.slice(0, -1)},${bigints.join(',')}}`;
}

describe('serializeBody', () => {
  const chat = { model: 'm', messages: [{ role: 'user', content: 'hi "there"\n' }], max_tokens: 1 };
  const cases: [string, Record<string, unknown>, Record<string, unknown>][] = [
    ['new members only', chat, { stream: true, stream_options: { include_usage: true }, return_token_ids: true }],
    ['a removal of an absent member', chat, { stream_options: undefined, stream: true }],
    ['a bigint among new members', chat, { bootstrap_room: 9223372036854775807n, bootstrap_host: 'h' }],
    ['an empty body', {}, { stream: true, bootstrap_room: 1n }],
    ['an empty body, nothing left', {}, { gone: undefined }],
    ['a replaced member', chat, { max_tokens: 5, stream: true }],
    ['a removed member', { ...chat, stream_options: { include_usage: false } }, { stream_options: undefined }],
    ['a replaced member and a bigint', { ...chat, stream: false }, { stream: true, bootstrap_room: 42n }],
    [
      'a member set to what it is',
      { ...chat, stream: true },
      { stream: true, stream_options: { include_usage: true } },
    ],
    ['a member set to what it is, then replaced', { ...chat, stream: true, n: 1 }, { stream: true, n: 2 }],
    ['an equal object member', { ...chat, stream_options: { a: 1 } }, { stream_options: { a: 1 } }],
  ];
  for (const [name, body, extra] of cases) {
    it(`${name}: the merged object's bytes`, () => {
      expect(serializeBody(body, extra)).toBe(expected(body, extra));
    });
  }

  it("a body parsed from the client's text is sent as that text, with the new members after it", () => {
    const text = '{ "model" : "m",\n  "messages": [{"role":"user","content":"caf\\u00e9"}], "max_tokens": 1 }\n';
    const body = JSON.parse(text) as Record<string, unknown>;
    rememberJsonText(body, text);
    const sent = serializeBody(body, { stream: true, bootstrap_room: 7n });
    // The client's own bytes (spacing, escapes) up to its closing brace, then kvgate's members.
    expect(sent).toBe(
      '{ "model" : "m",\n  "messages": [{"role":"user","content":"caf\\u00e9"}], "max_tokens": 1 ,"stream":true,"bootstrap_room":7}',
    );
    expect(JSON.parse(sent)).toEqual({ ...body, stream: true, bootstrap_room: 7 });
    expect(serializeBody(body)).toBe(text.trimEnd());
    // A field that replaces a member goes through the merged copy, which has no text of its own.
    expect(serializeBody(body, { max_tokens: 2 })).toBe(JSON.stringify({ ...body, max_tokens: 2 }));
    // Another object with the same members is serialised as before.
    expect(serializeBody({ ...body }, { stream: true })).toBe(`${JSON.stringify(body).slice(0, -1)},"stream":true}`);
  });

  it("a streaming client's text is sent as it came: kvgate's `stream: true` equals its own, only the usage option is added", () => {
    const text = '{"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": true}';
    const body = JSON.parse(text) as Record<string, unknown>;
    rememberJsonText(body, text);
    const sent = serializeBody(body, { stream: true, stream_options: { include_usage: true } });
    expect(sent).toBe(
      '{"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": true,"stream_options":{"include_usage":true}}',
    );
    expect(JSON.parse(sent)).toEqual({ ...body, stream_options: { include_usage: true } });
    // A member set to another value still goes through the merged copy.
    expect(serializeBody(body, { stream: false })).toBe(JSON.stringify({ ...body, stream: false }));
  });

  it('the client body is not changed', () => {
    const body = { model: 'm', prompt: 'x' };
    serializeBody(body, { stream: true });
    expect(body).toEqual({ model: 'm', prompt: 'x' });
  });
});
