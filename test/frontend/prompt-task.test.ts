/** The preprocessing task of a chat completion: the template variables vLLM gives its template. */
import { describe, expect, it } from 'vitest';
import { promptTask } from '../../src/frontend/prompt-task.js';
import { ChatTemplate, type ChatMessage } from '../../src/tokenizer/index.js';

function kwargsOf(body: Record<string, unknown>): Record<string, unknown> | undefined {
  const task = promptTask({
    endpoint: 'chat',
    body: { model: 'm', messages: [{ role: 'user', content: 'hi' }], ...body },
    model: 'm',
    maxPromptTokens: 1000,
    tokenData: undefined,
    loraName: undefined,
  });
  if (task.kind !== 'chat') throw new Error(`a chat task was expected, got ${task.kind}`);
  return task.chatTemplateKwargs as Record<string, unknown> | undefined;
}

describe('a chat completion task', () => {
  it("passes reasoning_effort to the template as vLLM does, with enable_thinking unless the request's kwargs set it", () => {
    expect(kwargsOf({})).toBeUndefined();
    expect(kwargsOf({ chat_template_kwargs: { x: 1 } })).toEqual({ x: 1 });
    expect(kwargsOf({ reasoning_effort: 'high' })).toEqual({ reasoning_effort: 'high', enable_thinking: true });
    expect(kwargsOf({ reasoning_effort: 'none' })).toEqual({ reasoning_effort: 'none', enable_thinking: false });
    expect(kwargsOf({ reasoning_effort: 'low', chat_template_kwargs: { enable_thinking: false, x: 1 } })).toEqual({
      enable_thinking: false,
      x: 1,
      reasoning_effort: 'low',
    });
    // The request's field wins over a reasoning_effort in its kwargs; null is no effort.
    expect(kwargsOf({ reasoning_effort: 'low', chat_template_kwargs: { reasoning_effort: 'high' } })).toMatchObject({
      reasoning_effort: 'low',
    });
    expect(kwargsOf({ reasoning_effort: null, chat_template_kwargs: { x: 1 } })).toEqual({ x: 1 });
  });

  it('so a template that thinks only when asked renders as the engine does', () => {
    const template = new ChatTemplate(
      '{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}<assistant>{% if enable_thinking %}<think>{% endif %}',
    );
    const messages = [{ role: 'user', content: 'hi' }] as ChatMessage[];
    expect(template.render(messages, { extra: kwargsOf({ reasoning_effort: 'medium' }) })).toBe(
      '<user>hi<assistant><think>',
    );
    expect(template.render(messages, { extra: kwargsOf({ reasoning_effort: 'none' }) })).toBe('<user>hi<assistant>');
  });
});
