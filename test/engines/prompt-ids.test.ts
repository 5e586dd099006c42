/**
 * A chat's first chunk with `return_token_ids` carries every prompt id: the
 * top-level `prompt_token_ids` member is cut from its text before the parse
 * and read only when asked, and the cut is exact: the rest parses to the
 * chunk less that one member, and anything that is not that member as a flat
 * array in the top-level object is left whole.
 */
import { describe, expect, it } from 'vitest';
import { leanChunk, type EngineEvent } from '../../src/engines/index.js';
import { EngineEventStream, kEnd, kFeed } from '../../src/engines/engine-stream.js';
import { cutPromptIds } from '../../src/engines/prompt-ids.js';

const ids = Array.from({ length: 2000 }, (_, i) => (i * 7919) % 151_000);

function first(extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    id: 'chatcmpl-1',
    object: 'chat.completion.chunk',
    created: 7,
    model: 'm',
    choices: [{ index: 0, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }],
    ...extra,
  };
}

/** `text` cut, checked: the rest parses to `text`'s JSON less the member, the ids to its value. */
function expectExactCut(text: string): void {
  const cut = cutPromptIds(text);
  expect(cut).toBeDefined();
  const whole = JSON.parse(text) as Record<string, unknown>;
  const { prompt_token_ids: value, ...rest } = whole;
  expect(JSON.parse(cut!.rest)).toEqual(rest);
  expect(JSON.parse(cut!.ids)).toEqual(value);
}

describe('cutPromptIds', () => {
  it("cuts the member wherever it sits in the top-level object (vLLM's place, the first, the middle), with or without spaces", () => {
    expectExactCut(JSON.stringify(first({ prompt_token_ids: ids })));
    expectExactCut(JSON.stringify({ prompt_token_ids: ids, ...first() }));
    expectExactCut(JSON.stringify({ id: 'x', prompt_token_ids: ids, choices: [] }));
    expectExactCut(JSON.stringify({ prompt_token_ids: ids }));
    expectExactCut(JSON.stringify(first({ prompt_token_ids: ids, usage: null }), null, 2));
    const spaced = `{ "id" : "x" , "prompt_token_ids" : [ ${ids.join(' , ')} ] , "choices" : [] }`;
    expectExactCut(spaced);
  });

  it('leaves whole a member nested in a choice, the key inside a string, and values that are not a flat array', () => {
    const long = 'y'.repeat(2000);
    expect(cutPromptIds(JSON.stringify({ choices: [{ index: 0, prompt_token_ids: ids }] }))).toBeUndefined();
    expect(cutPromptIds(JSON.stringify({ note: `"prompt_token_ids":[1,2] ${long}` }))).toBeUndefined();
    expect(cutPromptIds(JSON.stringify({ note: `\\"prompt_token_ids":[1] ${long}` }))).toBeUndefined();
    expect(cutPromptIds(JSON.stringify({ prompt_token_ids: [[1, 2], ids] }))).toBeUndefined();
    expect(cutPromptIds(JSON.stringify({ prompt_token_ids: ['1]', ...ids] }))).toBeUndefined();
    expect(cutPromptIds(JSON.stringify({ prompt_token_ids: null, pad: long }))).toBeUndefined();
    expect(cutPromptIds(JSON.stringify({ a: 'prompt_token_ids', pad: long }))).toBeUndefined();
    // The real member after a string that holds the key: the string's occurrence is skipped, the member cut.
    expectExactCut(JSON.stringify({ note: '"prompt_token_ids":[9]', prompt_token_ids: ids }));
  });

  it('does not cut a small chunk (parsed whole: nothing worth a scan)', () => {
    expect(cutPromptIds(JSON.stringify(first({ prompt_token_ids: [1, 2, 3] })))).toBeUndefined();
  });
});

async function eventsOf(data: string[]): Promise<EngineEvent[]> {
  const s = new EngineEventStream(
    {
      status: 200,
      headers: {},
      timings: { startedAt: 0, connectMs: 0, headersMs: 0, firstByteMs: 0, firstEventMs: undefined, endMs: undefined },
      highWaterMark: 16,
      maxEventBytes: 1 << 22,
    },
    { pause: () => undefined, resume: () => undefined, cancel: () => undefined },
  );
  s[kFeed](Buffer.from(data.map((d) => `data: ${d}\n\n`).join('')));
  s[kEnd]();
  const out: EngineEvent[] = [];
  for await (const ev of s) out.push(ev);
  return out;
}

describe('leanChunk on a stream event', () => {
  it("gives the chunk's JSON less the top-level prompt ids and their text, while `json` and `raw` stay the whole chunk", async () => {
    const text = JSON.stringify(first({ prompt_token_ids: ids }));
    const [ev] = await eventsOf([text]);
    const lean = leanChunk(ev!);
    expect(lean.json).toEqual(first());
    expect(JSON.parse(lean.cutPromptIds!)).toEqual(ids);
    expect(ev!.json).toEqual(JSON.parse(text));
    expect(ev!.raw.toString()).toBe(`data: ${text}\n\n`);
  });

  it('is the whole JSON, nothing cut, for a chunk without the member and once `json` was parsed first', async () => {
    const text = JSON.stringify(first({ prompt_token_ids: ids }));
    const [plain, parsed] = await eventsOf([JSON.stringify(first()), text]);
    expect(leanChunk(plain!)).toEqual({ json: first(), cutPromptIds: undefined });
    const whole = parsed!.json;
    expect(leanChunk(parsed!)).toEqual({ json: whole, cutPromptIds: undefined });
  });
});
