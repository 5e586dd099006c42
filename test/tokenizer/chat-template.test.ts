/**
 * What a chat template sees of the request's messages: each message as vLLM's chat parser hands it over
 * (`parse_chat_messages`), so kvgate renders the tokens the engine computes. Pinned against the demo model's
 * (Qwen3) template, which prints a tool call's arguments as given when they are a string and as JSON when they
 * are an object, and keeps an assistant's `reasoning_content` inside <think>.
 */
import { describe, expect, it } from 'vitest';
import { isKvgateError } from '../../src/errors/index.js';
import { ChatTemplate, demoTokenizerFiles, loadTokenizer, type ChatMessage } from '../../src/tokenizer/index.js';

const demo = loadTokenizer(demoTokenizerFiles());

const call = (args: unknown): Record<string, unknown> => ({
  id: 'call-1',
  type: 'function',
  function: { name: 'read_file', arguments: args },
});
const turn = (assistant: Record<string, unknown>): ChatMessage[] =>
  [
    { role: 'user', content: 'open it' },
    { role: 'assistant', content: null, ...assistant },
    { role: 'tool', tool_call_id: 'call-1', content: 'done' },
  ] as unknown as ChatMessage[];

describe('the messages a chat template sees', () => {
  it("parses a tool call's JSON arguments into the object (the engine prints it with JSON's spacing)", () => {
    const text = demo.renderChat(turn({ tool_calls: [call('{"path":"a.txt","lines":[1,2]}')] }));
    expect(text).toContain('{"name": "read_file", "arguments": {"path": "a.txt", "lines": [1, 2]}}');
    // An object is taken as it is; none or an empty string is an empty object.
    const asObject = demo.renderChat(turn({ tool_calls: [call({ path: 'a.txt', lines: [1, 2] })] }));
    expect(asObject).toBe(text);
    for (const empty of ['', null, undefined])
      expect(demo.renderChat(turn({ tool_calls: [call(empty)] }))).toContain('"arguments": {}}');
  });

  it('refuses arguments that are not JSON text, naming the field', () => {
    let err: unknown;
    try {
      demo.renderChat(turn({ tool_calls: [call('{"path": ')] }));
    } catch (e) {
      err = e;
    }
    expect(isKvgateError(err, 'KVG_ERR_INVALID_ARGUMENT')).toBe(true);
    expect((err as Error).message).toBe('messages[1].tool_calls[0].function.arguments must be JSON text');
  });

  it("passes an assistant's reasoning under both names, the deprecated reasoning_content where reasoning is unset", () => {
    const template = new ChatTemplate(
      '{% for m in messages %}[{{ m.role }}|{{ m.reasoning }}|{{ m.reasoning_content }}]{% endfor %}',
    );
    const render = (assistant: Record<string, unknown>): string =>
      template.render([
        { role: 'user', content: 'q' },
        { role: 'assistant', content: 'a', ...assistant },
      ] as never);
    expect(render({ reasoning: 'weighing it' })).toBe('[user||][assistant|weighing it|weighing it]');
    expect(render({ reasoning_content: 'weighing it' })).toBe('[user||][assistant|weighing it|weighing it]');
    expect(render({ reasoning: 'mine', reasoning_content: 'old' })).toBe('[user||][assistant|mine|mine]');
    expect(render({ reasoning: null })).toBe('[user||][assistant||]');
    // Qwen3 keeps the reasoning of the turns since the last user query inside <think>.
    expect(demo.renderChat(turn({ reasoning: 'weighing it', tool_calls: [call('{}')] }))).toContain(
      '<think>\nweighing it\n</think>',
    );
  });

  it('drops an empty tool_calls list and every field the engine does not pass on', () => {
    const template = new ChatTemplate(
      '{% for m in messages %}[{{ m.role }}|{{ m.tool_calls is defined }}|{{ m.extra is defined }}|' +
        '{{ m.name is defined }}|{{ m.tool_call_id is defined }}]{% endfor %}',
    );
    const text = template.render([
      { role: 'user', content: 'q', extra: 1, name: 'ann' },
      { role: 'assistant', content: 'a', tool_calls: [], extra: 2 },
      { role: 'tool', content: 'r', tool_call_id: 'c', name: 7 },
    ] as unknown as ChatMessage[]);
    expect(text).toBe('[user|false|false|true|false][assistant|false|false|false|false][tool|false|false|false|true]');
  });
});
