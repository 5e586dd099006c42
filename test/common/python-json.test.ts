/**
 * Numbers as vLLM's front end writes them: a Messages `tool_use` input becomes its tool call's arguments through
 * Python's `json.dumps`, and the chat template's `tojson` writes the parsed arguments the same way. Every expected
 * text below is what CPython printed for `json.dumps(json.loads(literal))`.
 */
import { describe, expect, it } from 'vitest';
import {
  InputSources,
  pythonFloatText,
  pythonJson,
  pythonNumberText,
  pythonToolsJson,
  readJson,
} from '../../src/common/python-json.js';

const PYTHON: readonly (readonly [string, string])[] = [
  ['1.0', '1.0'],
  ['1e5', '100000.0'],
  ['2.5E+3', '2500.0'],
  ['1e16', '1e+16'],
  ['9999999999999998.0', '9999999999999998.0'],
  ['1e-7', '1e-07'],
  ['0.0001', '0.0001'],
  ['0.00001', '1e-05'],
  ['0.1', '0.1'],
  ['123.456', '123.456'],
  ['123456789012345678901234', '123456789012345678901234'],
  ['12345678901234567890', '12345678901234567890'],
  ['-0.0', '-0.0'],
  ['-0', '0'],
  ['1.5e300', '1.5e+300'],
  ['1.7976931348623157e308', '1.7976931348623157e+308'],
  ['5e-324', '5e-324'],
  ['1e400', 'Infinity'],
  ['-1e400', '-Infinity'],
];

describe('pythonNumberText', () => {
  it.each(PYTHON)('writes %s as Python does (%s)', (literal, python) => {
    expect(pythonNumberText(literal)).toBe(python);
  });
});

describe('pythonFloatText', () => {
  it('writes a float value as repr(float) does', () => {
    expect(pythonFloatText(1)).toBe('1.0');
    expect(pythonFloatText(-2.5e-10)).toBe('-2.5e-10');
    expect(pythonFloatText(1234567890123456.7)).toBe('1234567890123456.8');
    expect(pythonFloatText(0)).toBe('0.0');
  });
});

describe('pythonJson', () => {
  it('writes a non-integral number as Python writes the float it came from', () => {
    // Only a float literal parses to a non-integral number, so its Python text is known without the source.
    expect(pythonJson({ a: 1e-7, b: [1.5e300, 0.1, -2.5e-5], c: 3 })).toBe(
      '{"a": 1e-07, "b": [1.5e+300, 0.1, -2.5e-05], "c": 3}',
    );
  });
});

describe('InputSources', () => {
  const read = (text: string, parsed: unknown): string | undefined => {
    const v = new InputSources(Buffer.from(text)).take(parsed);
    return v === undefined ? undefined : pythonJson(v);
  };

  it('reads an input object with its literals', () => {
    expect(read('{"messages": [{"type": "tool_use", "input" : {"x": 1.0, "y": [1e5]}}]}', { x: 1, y: [1e5] })).toBe(
      '{"x": 1.0, "y": [100000.0]}',
    );
  });

  it('passes over an "input" inside a string, a value "input", and one whose parse differs', () => {
    const text =
      '{"a": "say \\"input\\": {\\"x\\": 2.0}", "b": "input", "input": {"x": 3.0}, "c": {"input": {"x": 1.0}}}';
    expect(read(text, { x: 1 })).toBe('{"x": 1.0}');
    expect(read(text, { x: 2 })).toBeUndefined();
  });

  it('takes inputs in order, an input nested in one taken is not another', () => {
    const text = '[{"input": {"input": {"k": 1.0}}}, {"input": {"k": 2.0}}]';
    const sources = new InputSources(Buffer.from(text));
    expect(pythonJson(sources.take({ input: { k: 1 } }))).toBe('{"input": {"k": 1.0}}');
    expect(pythonJson(sources.take({ k: 2 }))).toBe('{"k": 2.0}');
    expect(sources.take({ k: 1 })).toBeUndefined();
  });
});

describe('readJson', () => {
  it('reads objects as JSON.parse does: an own __proto__, a repeated key first in place with its last value, escapes', () => {
    const text = '{"__proto__": {"a": 1}, "k": 1, "s": "q\\"\\u00e9\\\\", "k": [2, "x"], "constructor": 3}';
    const { value, end } = readJson(text, 0, Number);
    expect(value).toEqual(JSON.parse(text));
    expect(Object.keys(value as object)).toEqual(Object.keys(JSON.parse(text) as object));
    expect(Object.getPrototypeOf(value)).toBe(Object.prototype);
    expect(end).toBe(text.length);
  });
});

describe('pythonToolsJson', () => {
  const bytes = (tools: string): Buffer => Buffer.from(`{"model": "m", "tools": ${tools}, "messages": []}`);
  const tools = (text: string): unknown => JSON.parse(text) as unknown;

  it("is the client's tools text where an integral number's literal is a float's", () => {
    const text = '[{"type": "function", "function": {"name": "f", "parameters": {"minimum": 0.0, "n": 3}}}]';
    expect(pythonToolsJson(tools(text), bytes(text))).toBe(text);
  });

  it('is nothing where every number prints as Python does, integers written as integers among them', () => {
    const text = '[{"name": "f", "parameters": {"minimum": 0, "maximum": 100, "enum": ["1.0"]}}]';
    expect(pythonToolsJson(tools(text), bytes(text))).toBeUndefined();
    expect(pythonToolsJson([{ maximum: 0.5 }], bytes('[{"maximum": 0.5}]'))).toBeUndefined();
    expect(pythonToolsJson([], bytes('[]'))).toBeUndefined();
  });

  it("writes a conversion's tools from the literals: the last of a repeated `tools` member, as JSON.parse keeps", () => {
    const body = Buffer.from('{"tools": [{"x": 2.0}], "tools": [{"x": 1.0, "y": 1e-7}]}');
    const wrap = (t: unknown): unknown => (t as unknown[]).map((f) => ({ type: 'function', function: f }));
    expect(pythonToolsJson([{ x: 1, y: 1e-7 }], body, wrap)).toBe(
      '[{"type": "function", "function": {"x": 1.0, "y": 1e-07}}]',
    );
  });

  it('answers a large tools list seen before as its first reading did, per conversion', () => {
    // Over the memo's floor (4 KB): 100 tools, integral numbers, and in `floatText` one bound written 1.0.
    const list = Array.from(
      { length: 100 },
      (_, i) => `{"name": "tool_${i}", "parameters": {"minimum": 0, "maxItems": ${i}}}`,
    );
    const wholeText = `[${list.join(', ')}]`;
    const floatText = wholeText.replace('"maxItems": 99', '"maxItems": 99.0');
    const wrap = (t: unknown): unknown => (t as unknown[]).map((f) => ({ type: 'function', function: f }));
    const named = (t: unknown): unknown => (t as { name: string }[]).map((f) => f.name);
    const wrapped = `[${list.map((f) => `{"type": "function", "function": ${f}}`).join(', ')}]`.replace(
      '"maxItems": 99}',
      '"maxItems": 99.0}',
    );
    const names = `[${list.map((_, i) => `"tool_${i}"`).join(', ')}]`;
    const cases = [
      [wholeText, undefined, undefined],
      [wholeText, wrap, undefined],
      [floatText, undefined, floatText],
      [floatText, wrap, wrapped],
      [floatText, named, names],
      [floatText, wrap, wrapped],
    ] as const;
    // Each read twice, from fresh bytes as each request brings its own: the second a memo hit.
    for (const [text, convert, want] of cases) {
      for (let turn = 0; turn < 2; turn++) expect(pythonToolsJson(tools(text), bytes(text), convert)).toBe(want);
    }
  });

  it('writes from the parse a float Python writes in another form, with no literal to read', () => {
    expect(pythonToolsJson([{ y: 1e-7, z: 0.25 }], undefined)).toBe('[{"y": 1e-07, "z": 0.25}]');
  });
});
