/** The chat the simulated engine generates an agent request from, as vLLM's front ends convert it. */
import { describe, expect, it } from 'vitest';
import { agentChatBody } from '../../src/mocker/agent-endpoints.js';

describe('agentChatBody', () => {
  it('keeps a cache salt for Responses (vLLM passes it on) and drops it for Messages (vLLM has no such field)', () => {
    const messages = { model: 'm', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }], cache_salt: 't' };
    expect(agentChatBody('messages', messages, 'preserve').body.cache_salt).toBeUndefined();
    expect(agentChatBody('responses', { model: 'm', input: 'hi', cache_salt: 't' }, 'preserve').body.cache_salt).toBe(
      't',
    );
  });

  it('places inline system messages as its anthropic_inline_system says', () => {
    const body = {
      model: 'm',
      max_tokens: 8,
      system: 'P',
      messages: [
        { role: 'user', content: 'q' },
        { role: 'system', content: 'r' },
      ],
    };
    expect(agentChatBody('messages', body, 'preserve').body.messages).toEqual([
      { role: 'system', content: 'P' },
      { role: 'user', content: 'q' },
      { role: 'system', content: 'r' },
    ]);
    expect(agentChatBody('messages', body, 'fold').body.messages).toEqual([
      { role: 'system', content: 'P' },
      { role: 'user', content: 'q\n\nr' },
    ]);
  });

  it("renders with the effort as vLLM's front ends pass it: Messages' output_config.effort, Responses' reasoning", () => {
    const messages = { model: 'm', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }] };
    expect(
      agentChatBody('messages', { ...messages, output_config: { effort: 'low' } }, 'preserve').body
        .chat_template_kwargs,
    ).toEqual({ reasoning_effort: 'low', enable_thinking: true });
    const responses = { model: 'm', input: 'hi', reasoning: { effort: 'none' }, chat_template_kwargs: { x: 1 } };
    expect(agentChatBody('responses', responses, 'preserve').body.chat_template_kwargs).toEqual({
      x: 1,
      reasoning_effort: 'none',
      enable_thinking: false,
    });
  });
});
