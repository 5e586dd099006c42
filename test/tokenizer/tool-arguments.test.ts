/**
 * A tool call's arguments reach the template as vLLM's `json.loads` gives them: a float literal a float, an integer
 * literal an exact int, so `tojson` and printing write them as the engine's template does. Expected texts are
 * CPython's (`json.dumps` of `json.loads` of the same arguments).
 */
import { describe, expect, it } from 'vitest';
import { ChatTemplate, type ChatMessage } from '../../src/tokenizer/index.js';

const ARGUMENTS =
  '{"a": 1.0, "b": 1e5, "c": [1e16, 1e-7, 0.1, 123456789012345678901234], "d": -0.0, "e": 2, "f": "1.0"}';
const PYTHON =
  '{"a": 1.0, "b": 100000.0, "c": [1e+16, 1e-07, 0.1, 123456789012345678901234], "d": -0.0, "e": 2, "f": "1.0"}';

function call(args: string): ChatMessage[] {
  return [
    { role: 'user', content: 'go' },
    {
      role: 'assistant',
      content: '',
      tool_calls: [{ id: 'c1', type: 'function', function: { name: 'f', arguments: args } }],
    } as ChatMessage,
  ];
}

describe('tool-call arguments in a template', () => {
  it('tojson writes each number as Python does (a chat completion with the arguments as text)', () => {
    const t = new ChatTemplate('{% for c in messages[1].tool_calls %}{{ c.function.arguments | tojson }}{% endfor %}');
    expect(t.interpretedBecause).toBeUndefined();
    expect(t.render(call(ARGUMENTS))).toBe(PYTHON);
  });

  it('printing a value and its truthiness read the Python number', () => {
    const t = new ChatTemplate(
      '{% for c in messages[1].tool_calls %}{% for k, v in c.function.arguments.items() %}' +
        '{{ k }}={{ v }}{% if v %}+{% endif %};{% endfor %}{% endfor %}',
    );
    expect(t.render(call('{"x": 1.0, "y": 0.0, "z": 12345678901234567890, "w": 1e-7}'))).toBe(
      'x=1.0+;y=0.0;z=12345678901234567890+;w=1e-07+;',
    );
  });

  it('any other use of such a number renders as before, by the interpreter', () => {
    const t = new ChatTemplate(
      '{% for c in messages[1].tool_calls %}{% for k, v in c.function.arguments.items() %}' +
        '{{ v + 1 }};{% endfor %}{% endfor %}',
    );
    expect(t.interpretedBecause).toBeUndefined();
    expect(t.render(call('{"x": 1.0, "y": 2}'))).toBe('2;3;');
    expect(t.fallbacks).toBe(1);
  });

  it('arguments without such numbers are parsed as JSON.parse parses them', () => {
    const t = new ChatTemplate('{% for c in messages[1].tool_calls %}{{ c.function.arguments | tojson }}{% endfor %}');
    expect(t.render(call('{"x": 1, "y": 0.5, "z": "a\\"b", "__proto__": {"q": []}}'))).toBe(
      '{"x": 1, "y": 0.5, "z": "a\\"b", "__proto__": {"q": []}}',
    );
    expect(t.render(call('{"x": 1.5, "__proto__": {"q": 2.0}}'))).toBe('{"x": 1.5, "__proto__": {"q": 2.0}}');
    expect(t.fallbacks).toBe(0);
  });
});
