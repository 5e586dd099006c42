/**
 * A tool call's arguments text parsed as vLLM's chat parser parses it (Python's `json.loads`) for the template:
 * a float literal stays a float and an integer literal an exact int, so the template's `tojson` and printing write
 * them as the engine's template does (`1.0`, `1e-07`, `12345678901234567890`), not as JavaScript numbers print
 * (`1`, `1e-7`, `12345678901234567000`).
 *
 * Contract: the result is `JSON.parse(text)` with each number JavaScript would print otherwise than Python, or read
 * as another kind, as a `PythonNumber` (template-values.ts); the others stay plain numbers. Why cheap: a text without
 * a float literal or a 16-digit integer where a value starts (common's `mayDifferInPython`) has no such number, and
 * is only `JSON.parse`d; the others are read once more (common's `readJson`).
 */
import { mayDifferInPython, pythonNumberText, readJson } from '../common/index.js';
import { PythonNumber } from './template-values.js';

/**
 * `text` parsed, its numbers as the template must see them (module comment).
 * @throws SyntaxError for a text that is not JSON (the error `JSON.parse` throws).
 */
export function parseToolArguments(text: string): unknown {
  const plain: unknown = JSON.parse(text);
  if (!mayDifferInPython(text)) return plain;
  return readJson(text, 0, numberOf).value;
}

/** A plain number where JavaScript prints it as Python does and reads it as the same kind, else a `PythonNumber`. */
function numberOf(literal: string): number | PythonNumber {
  const value = Number(literal);
  const python = pythonNumberText(literal);
  const float = python.includes('.') || python.includes('e') || !Number.isFinite(value);
  return python === String(value) && Number.isInteger(value) !== float ? value : new PythonNumber(value, python);
}
