/**
 * A JSON object known by its text (issue 23, section 2): its top-level
 * members found in one pass, bodies written by joining slices of the text
 * (members replaced where they stood, removed, added), and the lazily parsed
 * object a large body becomes on the main thread, which reads as its parse
 * and answers what routing asks of a heavy member without parsing it.
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import {
  jsonByteMembers,
  jsonMembers,
  jsonSplice,
  jsonTextOf,
  lazyJsonObject,
  outlineJsonObject,
  rememberJsonText,
  withJsonMembers,
  type JsonMember,
} from '../../src/common/index.js';
import {
  dpRankLegFields,
  mergeLegFields,
  sglangDecodeLegFields,
  sglangPrefillLegFields,
  streamingBodyFields,
  vllmDecodeLegFields,
  vllmPrefillLegFields,
} from '../../src/engines/index.js';
import { requestPayload, serializeBody } from '../../src/engines/request-body.js';
import { continuationRequest, midStreamBlocker } from '../../src/routing/push/continuation.js';

/** The members of `text` each key once, as a body parsed off the main thread has them. */
function onceEach(text: string): { text: string; members: JsonMember[] } {
  return jsonSplice(text, jsonMembers(text));
}

/** A lazily held object of `text`, built as the worker and the main thread do between them. */
function lazy(text: string): Record<string, unknown> {
  const { text: t, members } = onceEach(text);
  const { light, outlines } = outlineJsonObject(JSON.parse(t) as Record<string, unknown>, members);
  // What crosses the thread boundary is a structured clone.
  return lazyJsonObject(t, members, structuredClone(light), structuredClone(outlines));
}

const tools = Array.from({ length: 300 }, (_, i) => ({
  type: 'function',
  function: { name: `f${i}`, parameters: { type: 'object', properties: { a: { type: 'string' } } } },
}));
const heavyBody = {
  model: 'm',
  messages: Array.from({ length: 2000 }, (_, i) => ({
    role: i % 2 === 0 ? 'user' : 'assistant',
    content: `turn ${i}`,
  })),
  tools,
  tool_choice: 'auto',
  response_format: {
    type: 'json_schema',
    json_schema: {
      name: 's',
      schema: { type: 'object', properties: Object.fromEntries(tools.map((t) => [t.function.name, t])) },
    },
  },
  stream: true,
  stream_options: { include_usage: false },
  max_tokens: 7,
};

afterEach(() => {
  vi.restoreAllMocks();
});

describe('jsonMembers', () => {
  it('finds each top-level member of a text with spacing, escapes, braces in strings and nesting; slices parse to the values', () => {
    const text = ' {\n "a\\u0062" : "x\\"}{]" ,"n":-1.5e3,"t":true , "o":{"k":["}",{"q":"\\\\"}]},"e":[],"z":null }\n';
    const members = jsonMembers(text);
    expect(members.map((m) => m.key)).toEqual(['ab', 'n', 't', 'o', 'e', 'z']);
    const parsed = JSON.parse(text) as Record<string, unknown>;
    for (const m of members) expect(JSON.parse(text.slice(m.start, m.end))).toEqual(parsed[m.key]);
    expect(text.slice(members[3]!.from, members[3]!.from + 3)).toBe('"o"');
    expect(jsonMembers('{}')).toEqual([]);
  });
});

describe('jsonSplice and withJsonMembers', () => {
  const text = '{"model":"m","stream":false,"dup":1,"prompt":"hi","dup":2,"max_tokens":3}';
  const parsed = JSON.parse(text) as Record<string, unknown>;

  it('writes the object with fields replaced where they stood, removed, added, a bigint exact; a repeated key once, its last value', () => {
    const { text: out, members } = jsonSplice(text, jsonMembers(text), {
      stream: true,
      max_tokens: undefined,
      bootstrap_room: 9223372036854775807n,
      x: [1],
    });
    expect(out).toBe('{"model":"m","stream":true,"dup":2,"prompt":"hi","bootstrap_room":9223372036854775807,"x":[1]}');
    expect(members.map((m) => [m.key, out.slice(m.start, m.end)])).toEqual([
      ['model', '"m"'],
      ['stream', 'true'],
      ['dup', '2'],
      ['prompt', '"hi"'],
      ['bootstrap_room', '9223372036854775807'],
      ['x', '[1]'],
    ]);
    for (const m of members)
      expect(out.slice(m.from, m.from + JSON.stringify(m.key).length)).toBe(JSON.stringify(m.key));
  });

  it('a copy with fields laid over keeps the text true: it is written from slices, never serialised', () => {
    const { text: t, members } = onceEach(text);
    const body = JSON.parse(t) as Record<string, unknown>;
    rememberJsonText(body, t, members);
    const copy = withJsonMembers(body, { model: 'served-name', nvext: undefined });
    expect(copy).toEqual({ ...parsed, model: 'served-name' });
    const stringify = vi.spyOn(JSON, 'stringify');
    const sent = serializeBody(copy, { stream: true, bootstrap_room: 5n });
    // Only the new fields' values were serialised, not the body.
    expect(stringify.mock.calls.every(([v]) => typeof v !== 'object' || v === null)).toBe(true);
    stringify.mockRestore();
    expect(JSON.parse(sent)).toEqual({ ...parsed, model: 'served-name', stream: true, bootstrap_room: 5 });
    expect(JSON.parse(jsonTextOf(copy)!)).toEqual(copy);
    // Without members remembered, the copy has no text (it is serialised when sent, as before).
    const plain = JSON.parse(text) as Record<string, unknown>;
    rememberJsonText(plain, text);
    expect(jsonTextOf(withJsonMembers(plain, { model: 'x' }))).toBeUndefined();
  });
});

describe('lazyJsonObject: a large body on the main thread', () => {
  const text = JSON.stringify(heavyBody);

  it('reads as its parse, and writes to the same object', () => {
    const body = lazy(text);
    expect(Object.keys(body)).toEqual(Object.keys(heavyBody));
    expect(JSON.parse(JSON.stringify(body))).toEqual(heavyBody);
    expect(body).toEqual(heavyBody);
    expect((body.messages as { content: string }[])[1999]!.content).toBe('turn 1999');
    expect((body.tools as unknown[]).map((t) => (t as { function: { name: string } }).function.name)).toEqual(
      tools.map((t) => t.function.name),
    );
  });

  it('answers what routing reads of heavy members without parsing them, and writes an engine body from slices', () => {
    const body = lazy(text);
    const parse = vi.spyOn(JSON, 'parse');
    expect(Array.isArray(body.messages)).toBe(true);
    expect((body.messages as unknown[]).length).toBe(2000);
    expect((body.response_format as { type: string }).type).toBe('json_schema');
    // What a resumed stream could not honour, read off the outlines.
    expect(midStreamBlocker(body)).toBe(midStreamBlocker(heavyBody));
    expect(midStreamBlocker({ ...body, response_format: undefined })).toBe('tools');
    const sent = serializeBody(withJsonMembers(body, { model: 'served' }), {
      stream: true,
      stream_options: { include_usage: true },
      bootstrap_room: 3n,
    });
    expect(parse).not.toHaveBeenCalled();
    parse.mockRestore();
    expect(JSON.parse(sent)).toEqual({
      ...heavyBody,
      model: 'served',
      stream: true,
      stream_options: { include_usage: true },
      bootstrap_room: 3,
    });
  });

  it('sends light members whole within a budget, and outlines heavy arrays, objects and strings', () => {
    const { text: t, members } = onceEach(text);
    const { light, outlines } = outlineJsonObject(JSON.parse(t) as Record<string, unknown>, members);
    expect(Object.keys(light).sort()).toEqual(['max_tokens', 'model', 'stream', 'stream_options', 'tool_choice']);
    expect(outlines).toEqual({
      messages: { kind: 'array', length: 2000 },
      tools: { kind: 'array', length: 300 },
      response_format: { kind: 'object', scalars: { type: 'json_schema' } },
    });
    // A long string is not sent again (the text holds it): it is read by parsing its slice, once.
    const long = 'x\n\u00e9'.repeat(40_000);
    const big = onceEach(JSON.stringify({ model: 'm', prompt: long }));
    expect(outlineJsonObject(JSON.parse(big.text) as Record<string, unknown>, big.members).outlines).toEqual({
      prompt: { kind: 'string' },
    });
    const body = lazy(big.text);
    const parse = vi.spyOn(JSON, 'parse');
    const copy = withJsonMembers(body, { model: 'served' });
    expect(parse).not.toHaveBeenCalled();
    expect(copy.prompt).toBe(long);
    expect(body.prompt).toBe(long);
    // Parsed once: the copy shares the original's getter.
    expect(parse).toHaveBeenCalledTimes(1);
    expect(JSON.parse(serializeBody(copy, { stream: true }))).toEqual({ model: 'served', prompt: long, stream: true });
  });

  it('keeps a member named __proto__ as an own member, as JSON.parse does', () => {
    const t = '{"__proto__":{"polluted":true},"a":[1,2,3]}';
    const body = lazy(t);
    expect(Object.hasOwn(body, '__proto__')).toBe(true);
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
    expect(JSON.parse(JSON.stringify(body))).toEqual(JSON.parse(t));
  });
});

/** A lazily held object of the client's UTF-8 `bytes`, as a preprocessing thread and the main thread build it now. */
function lazyBytes(bytes: Buffer): Record<string, unknown> {
  const members = jsonByteMembers(bytes);
  const text = bytes.toString('utf8').replace(/^\uFEFF/, '');
  const { light, outlines } = outlineJsonObject(JSON.parse(text) as Record<string, unknown>, members);
  return lazyJsonObject(bytes, members, structuredClone(light), structuredClone(outlines));
}

describe('jsonByteMembers', () => {
  it('finds members as byte offsets past a byte order mark, in non-ASCII and escaped text; each key once', () => {
    const text = String.raw`{ "k\u00e9y":"日本語 \"}{ 😀" , "o":{"é":["]",{"q":"\\"}]},"n":-1.5,"k\u00e9y":["ü"] }`;
    const bytes = Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from(text)]);
    const members = jsonByteMembers(bytes);
    const parsed = JSON.parse(text) as Record<string, unknown>;
    // A repeated key once, with its last value, where it first stood (as JSON.parse keeps it).
    expect(members.map((m) => m.key)).toEqual(['kéy', 'o', 'n']);
    for (const m of members) {
      expect(JSON.parse(bytes.subarray(m.start, m.end).toString('utf8'))).toEqual(parsed[m.key]);
      expect(bytes.subarray(m.from, m.from + 1).toString()).toBe('"');
    }
    // Character offsets of the same text, for a text.
    const chars = jsonMembers(text);
    expect(chars.map((m) => JSON.parse(text.slice(m.start, m.end)) as unknown)).toEqual([
      '日本語 "}{ 😀',
      parsed.o,
      -1.5,
      ['ü'],
    ]);
  });

  it("hands a member's array to the caller's reader, and takes the end it gives", () => {
    const bytes = Buffer.from('{"a":[1,2],"prompt":[3, 4],"b":["[",5]}');
    const seen: string[] = [];
    const members = jsonByteMembers(bytes, (key, start) => {
      seen.push(key);
      return key === 'prompt' ? bytes.indexOf(']', start) + 1 : undefined;
    });
    expect(seen).toEqual(['a', 'prompt', 'b']);
    expect(members.map((m) => bytes.subarray(m.start, m.end).toString())).toEqual(['[1,2]', '[3, 4]', '["[",5]']);
  });

  it('scans the same bytes once: a later call answers the members found, as a new array', () => {
    const bytes = Buffer.from('{"a":[1,2],"tools":[{"x":1.0}]}');
    const first = jsonByteMembers(bytes, () => undefined);
    first.pop();
    const again = jsonByteMembers(bytes);
    expect(again.map((m) => m.key)).toEqual(['a', 'tools']);
    // Written to against the contract: the members found before are answered, so the bytes were not scanned again.
    bytes.subarray(again[1]!.start, again[1]!.end).fill(0x20);
    expect(jsonByteMembers(bytes)).toEqual(again);
    // Another view of the same memory is other bytes to the memo: scanned anew.
    expect(jsonByteMembers(new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength))).not.toEqual(again);
  });
});

describe("an engine's body written from the client's bytes", () => {
  const long = (seed: number): string =>
    Array.from(
      { length: 400 },
      (_, i) => ['ünï', '日本語', '😀', 'say "hi"', 'C:\\x', 'a\nb', '\u2028'][(seed + i) % 7],
    ).join(' ');
  const ids = Array.from({ length: 3000 }, (_, i) => (i * 31) % 50_000);
  const messages = Array.from({ length: 30 }, (_, i) => ({
    role: i % 2 === 0 ? 'user' : 'assistant',
    content: long(i),
  }));
  /** Client bodies as a client may write them: key order, spacing, a repeated key, `__proto__`, big numbers, nvext. */
  const corpus: { name: string; text: string }[] = [
    { name: 'a non-ASCII chat', text: JSON.stringify({ model: 'm', messages, stream: true, max_tokens: 5 }) },
    {
      name: 'a chat pretty-printed, with stream_options and nvext',
      text: JSON.stringify(
        { messages, model: 'm', stream_options: { include_usage: false }, nvext: { token_data: ids } },
        null,
        2,
      ),
    },
    {
      name: 'a repeated key and __proto__',
      text: `{"model":"m","max_tokens":1,"messages":${JSON.stringify(messages)},"max_tokens":9,"__proto__":{"x":1}}`,
    },
    { name: 'a token-id completion', text: JSON.stringify({ model: 'm', prompt: ids, seed: 12345678901234 }) },
    {
      name: 'a text completion with tools and response_format',
      text: JSON.stringify({
        model: 'm',
        prompt: long(3),
        tools: [{ type: 'function' }],
        response_format: { type: 'x' },
      }),
    },
  ];
  /** Every way the engine's body differs from the client's: routing's model name and the legs' fields. */
  const legs = (
    body: Record<string, unknown>,
  ): { name: string; model?: string; fields?: Record<string, unknown> }[] => [
    { name: 'as it came' },
    { name: 'the served model name', model: 'served' },
    { name: 'nvext removed', fields: { nvext: undefined } },
    { name: 'a completion token_data as its prompt', fields: { nvext: undefined, prompt: ids } },
    {
      name: 'streamed with usage and the ids a migration resumes from',
      model: 'served',
      fields: { ...streamingBodyFields(body), return_token_ids: true },
    },
    { name: 'an agent API unstreamed', fields: { stream: false } },
    {
      name: 'max_tokens clamped, max_completion_tokens dropped',
      fields: { max_tokens: 1, max_completion_tokens: undefined },
    },
    {
      name: 'a vLLM prefill leg on a dp rank',
      fields: mergeLegFields(dpRankLegFields('vllm', 1), vllmPrefillLegFields(body, { requestId: 'r' })).fields,
    },
    { name: 'a vLLM decode leg', fields: vllmDecodeLegFields({ requestId: 'r', kvTransferParams: { a: [1] } }).fields },
    {
      name: 'an SGLang prefill leg (63-bit room)',
      fields: sglangPrefillLegFields(body, { bootstrap: { host: 'h', port: 1, room: 2n ** 62n + 1n } }).fields,
    },
    {
      name: 'an SGLang decode leg on a dp rank',
      fields: mergeLegFields(
        dpRankLegFields('sglang', 2),
        sglangDecodeLegFields({ bootstrap: { host: 'h', port: 1, room: 7n } }),
      ).fields,
    },
  ];

  for (const c of corpus) {
    it(`${c.name}: the same JSON value as the body written from its text, through every leg`, () => {
      const bytes = Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from(c.text)]);
      const plain = JSON.parse(c.text) as Record<string, unknown>;
      for (const leg of legs(plain)) {
        // Today's large body: the lazily held object over the text; and the plain parse serialised, for reference.
        const fromText = lazy(c.text);
        const fromBytes = lazyBytes(bytes);
        const [t, b] = [fromText, fromBytes].map((o) =>
          leg.model === undefined ? o : withJsonMembers(o, { model: leg.model }),
        );
        const p = leg.model === undefined ? plain : { ...plain, model: leg.model };
        const sent = requestPayload(b!, leg.fields);
        expect(Buffer.isBuffer(sent), leg.name).toBe(true);
        const wire = JSON.parse(sent.toString()) as unknown;
        expect(wire, leg.name).toEqual(JSON.parse(serializeBody(t!, leg.fields)));
        expect(wire, leg.name).toEqual(JSON.parse(serializeBody(p, leg.fields)));
        // A migrated stream resumed elsewhere: a completion built from the body's members, not a splice.
        const path = plain.messages !== undefined ? '/v1/chat/completions' : '/v1/completions';
        expect(JSON.stringify(continuationRequest(path, b!, [1, 2], [3]))).toBe(
          JSON.stringify(continuationRequest(path, p, [1, 2], [3])),
        );
        // The client's bytes of a member kvgate did not write are sent as they came.
        const kept = jsonByteMembers(bytes).find((m) => m.key === 'messages' || m.key === 'tools');
        if (kept !== undefined)
          expect((sent as Buffer).indexOf(bytes.subarray(kept.from, kept.end))).toBeGreaterThan(0);
      }
    });
  }

  it('reads a heavy member from the bytes only when something reads it, and decodes nothing to write the body', () => {
    const text = JSON.stringify({ model: 'm', messages, stream: true });
    const body = lazyBytes(Buffer.from(text));
    const parse = vi.spyOn(JSON, 'parse');
    const toString = vi.spyOn(Buffer.prototype, 'toString');
    const sent = requestPayload(withJsonMembers(body, { model: 'served' }), {
      stream_options: { include_usage: true },
    });
    expect(parse).not.toHaveBeenCalled();
    expect(toString).not.toHaveBeenCalled();
    expect((body.messages as unknown[]).length).toBe(messages.length);
    expect(parse).not.toHaveBeenCalled();
    expect((body.messages as { content: string }[])[7]!.content).toBe(messages[7]!.content);
    expect(parse).toHaveBeenCalledTimes(1);
    parse.mockRestore();
    toString.mockRestore();
    expect(JSON.parse((sent as Buffer).toString())).toEqual({
      model: 'served',
      messages,
      stream: true,
      stream_options: { include_usage: true },
    });
  });
});
