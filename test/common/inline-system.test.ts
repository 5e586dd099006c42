/**
 * System messages inside a Messages request's `messages`, placed as vLLM's Messages front end places them:
 * those at the head join the system prompt, `ctx` and `msg` are user messages, a system message never comes
 * between a tool call and its results, and the rest stay system turns (`preserve`, where there is a system
 * prompt) or fold into user messages (`fold`). Each case also checks that a turn placed is an extension of the
 * turn before it placed: the property that keeps an agent's prefix cached.
 */
import { describe, expect, it } from 'vitest';
import { placeInlineSystem, type InlineSystemMode } from '../../src/common/inline-system.js';

type Json = Record<string, unknown>;

const place = (messages: Json[], prompt: string, mode: InlineSystemMode) => {
  const out = placeInlineSystem(messages, prompt, mode);
  return { leading: out.leading, messages: out.messages.map((m) => m.message), at: out.messages.map((m) => m.index) };
};

const toolUse: Json = {
  role: 'assistant',
  content: [
    { type: 'text', text: 'Listing.' },
    { type: 'tool_use', id: 't1', name: 'ls', input: {} },
  ],
};
const toolResult: Json = { role: 'user', content: [{ type: 'tool_result', tool_use_id: 't1', content: 'a.py' }] };

describe('placeInlineSystem', () => {
  it('leaves a request without system messages as it is, ctx and msg read as user', () => {
    const messages = [
      { role: 'user', content: 'q' },
      { role: 'ctx', content: 'context blob' },
      { role: 'msg', content: 'more' },
    ];
    expect(place(messages, 'P', 'preserve')).toEqual({
      leading: '',
      messages: [
        { role: 'user', content: 'q' },
        { role: 'user', content: 'context blob' },
        { role: 'user', content: 'more' },
      ],
      at: [0, 1, 2],
    });
  });

  it('joins the leading system messages to the system prompt, without the billing header', () => {
    const out = place(
      [
        { role: 'system', content: 'first' },
        {
          role: 'system',
          content: [
            { type: 'text', text: 'x-anthropic-billing-header: cch=1;' },
            { type: 'text', text: 'second' },
          ],
        },
        { role: 'user', content: 'q' },
      ],
      '',
      'fold',
    );
    expect(out.leading).toBe('first\n\nsecond');
    expect(out.messages).toEqual([{ role: 'user', content: 'q' }]);
    expect(out.at).toEqual([2]);
  });

  it('preserve: a later system message stays a system turn, moved after the results of a tool call it interrupts', () => {
    const out = place(
      [{ role: 'user', content: 'q' }, toolUse, { role: 'system', content: 'reminder' }, toolResult],
      'P',
      'preserve',
    );
    expect(out.messages).toEqual([
      { role: 'user', content: 'q' },
      toolUse,
      toolResult,
      { role: 'system', content: 'reminder' },
    ]);
    expect(out.at).toEqual([0, 1, 3, 2]);
  });

  it('preserve without any system prompt folds, as vLLM does', () => {
    const out = place(
      [
        { role: 'user', content: 'q' },
        { role: 'system', content: 'reminder' },
      ],
      '',
      'preserve',
    );
    expect(out.messages).toEqual([{ role: 'user', content: 'q\n\nreminder' }]);
  });

  it('fold: into the user message before, its last tool result, the next user message, or a user message of its own', () => {
    // Appended to the user's own text (a text block merged, not added).
    expect(
      place(
        [
          { role: 'user', content: [{ type: 'text', text: 'q' }] },
          { role: 'system', content: 'r' },
        ],
        'P',
        'fold',
      ).messages,
    ).toEqual([{ role: 'user', content: [{ type: 'text', text: 'q\n\nr' }] }]);
    // A user message of tool results only: into the last result's content.
    expect(place([toolUse, toolResult, { role: 'system', content: 'r' }], 'P', 'fold').messages).toEqual([
      toolUse,
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: 't1', content: 'a.py\n\nr' }] },
    ]);
    // After an assistant turn: prepended to the next user message.
    expect(
      place(
        [
          { role: 'assistant', content: 'a' },
          { role: 'system', content: 'r' },
          { role: 'user', content: 'q' },
        ],
        'P',
        'fold',
      ).messages,
    ).toEqual([
      { role: 'assistant', content: 'a' },
      { role: 'user', content: 'r\n\nq' },
    ]);
    // After an assistant turn with nothing after it: a user message of its own, at the system message's index.
    const own = place(
      [
        { role: 'assistant', content: 'a' },
        { role: 'system', content: 'r' },
      ],
      'P',
      'fold',
    );
    expect(own.messages).toEqual([
      { role: 'assistant', content: 'a' },
      { role: 'user', content: 'r' },
    ]);
    expect(own.at).toEqual([0, 1]);
  });

  it.each(['preserve', 'fold'] as const)('%s: each turn placed extends the turn before it placed', (mode) => {
    const turn1: Json[] = [
      { role: 'user', content: 'q1' },
      { role: 'system', content: 'reminder A' },
    ];
    const turn2: Json[] = [
      ...turn1,
      { role: 'assistant', content: 'a1' },
      { role: 'user', content: 'q2' },
      { role: 'system', content: 'reminder B' },
    ];
    const one = place(turn1, 'P', mode).messages;
    const two = place(turn2, 'P', mode).messages;
    expect(two.slice(0, one.length)).toEqual(one);
  });

  it('refuses a message that is not an object, naming it', () => {
    expect(() => placeInlineSystem([{ role: 'user', content: 'q' }, 7], 'P', 'fold')).toThrow(
      /^messages\[1\] must be an object/,
    );
  });
});
