/**
 * Gateway cost per request (streaming): an engine stream hands every event of
 * one upstream read over in one batch, and reads most chunks without parsing
 * them (a chunk of the stream's learned shape with only its text changed),
 * with exactly the info a parse would give.
 */
import { describe, expect, it } from 'vitest';
import { eventInfo, isPlainChunk, readChunkInfo, type EngineEvent } from '../../src/engines/index.js';
import { EngineEventStream, kEnd, kFeed } from '../../src/engines/engine-stream.js';

function stream(): { s: EngineEventStream; paused: () => boolean } {
  let paused = false;
  const s = new EngineEventStream(
    {
      status: 200,
      headers: {},
      timings: { startedAt: 0, connectMs: 0, headersMs: 0, firstByteMs: 0, firstEventMs: undefined, endMs: undefined },
      highWaterMark: 4,
      maxEventBytes: 1 << 20,
    },
    { pause: () => (paused = true), resume: () => (paused = false), cancel: () => undefined },
  );
  return { s, paused: () => paused };
}

const sse = (data: string[]): Buffer => Buffer.from(data.map((d) => `data: ${d}\n\n`).join(''));

function chunk(content: unknown, extra: Record<string, unknown> = {}, delta: Record<string, unknown> = {}): string {
  return JSON.stringify({
    id: 'chatcmpl-1',
    object: 'chat.completion.chunk',
    created: 7,
    model: 'm',
    choices: [{ index: 0, delta: { ...delta, content }, logprobs: null, finish_reason: null, ...extra }],
  });
}

describe('EngineEventStream batches', () => {
  it('hands every event of one upstream read over in one batch, then the end; the paused socket resumes when a batch is taken', async () => {
    const { s, paused } = stream();
    const it = s.batches();
    const first = it.next();
    s[kFeed](sse([chunk('a'), chunk('b'), chunk('c')]));
    expect((await first).value!.map((e: EngineEvent) => e.data)).toEqual([chunk('a'), chunk('b'), chunk('c')]);
    s[kFeed](sse([chunk('d'), chunk('e'), chunk('f'), chunk('g'), '[DONE]']));
    expect(paused()).toBe(true);
    const second = await it.next();
    expect(second.value!.map((e: EngineEvent) => e.done)).toEqual([false, false, false, false, true]);
    expect(paused()).toBe(false);
    s[kEnd]();
    expect(await it.next()).toEqual({ value: undefined, done: true });
  });

  it('is read once: batches() after iterating throws', () => {
    const { s } = stream();
    s[Symbol.asyncIterator]();
    expect(() => s.batches()).toThrow(TypeError);
  });
});

describe('plain chunks (read without parsing)', () => {
  const datas = [
    chunk('', {}, { role: 'assistant' }),
    chunk('Hel'),
    chunk('lo'),
    chunk(' wor'),
    chunk('ld \u00e9\u4e16'),
    chunk('say "hi"'),
    chunk('back\\slash'),
    chunk('tab\there'),
    chunk('line\nbreak'),
    chunk('x'),
    chunk(''),
    chunk('y', { token_ids: [5] }),
    chunk('z'),
    chunk('end', { finish_reason: 'stop' }),
    JSON.stringify({
      id: 'chatcmpl-1',
      object: 'chat.completion.chunk',
      created: 7,
      model: 'm',
      choices: [],
      usage: { prompt_tokens: 3, completion_tokens: 9, total_tokens: 12 },
    }),
    JSON.stringify({ error: { message: 'boom', code: 500 } }),
    'not json',
    '[DONE]',
  ];

  it('every event reads exactly what a parse reads, and the repeated shapes are not parsed', async () => {
    const { s } = stream();
    const it = s.batches();
    s[kFeed](sse(datas));
    s[kEnd]();
    const events = (await it.next()).value!;
    const plain = events.map((ev: EngineEvent) => {
      const info = eventInfo(ev);
      let parsed: unknown;
      try {
        parsed = ev.done ? undefined : JSON.parse(ev.data);
      } catch {
        parsed = undefined;
      }
      expect(info, ev.data).toEqual(parsed === undefined ? undefined : readChunkInfo(parsed));
      expect(ev.json, ev.data).toEqual(parsed);
      return isPlainChunk(ev);
    });
    // 'lo', ' wor', the non-ASCII text, 'x' and 'z' have the shape of an earlier chunk; text with quotes, escapes or
    // nothing, token ids, a finish reason, usage, an error and non-JSON never do.
    expect(plain).toEqual([
      false,
      false,
      true,
      true,
      true,
      false,
      false,
      false,
      false,
      true,
      false,
      false,
      true,
      false,
      false,
      false,
      false,
      false,
    ]);
  });

  it("a chunk whose text reaches into its shape's prefix or suffix is parsed", () => {
    const { s } = stream();
    const it = s.batches();
    const a = chunk('a');
    const b = a.replace('"content":"a"', '"content":"b","refusal":"c"');
    s[kFeed](sse([a, b]));
    return it.next().then(({ value }) => {
      const [first, second] = value!;
      eventInfo(first!);
      expect(isPlainChunk(second!)).toBe(false);
      expect(eventInfo(second!)).toEqual(readChunkInfo(JSON.parse(b)));
    });
  });
});
