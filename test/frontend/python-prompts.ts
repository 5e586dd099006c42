/**
 * Prompts Python renders for request bodies, shared by the gateway's and the mocker's tests: each was rendered by
 * jinja2 with the transformers `tojson` (`json.dumps(x, ensure_ascii=False)`) and the demo model's Qwen3 template
 * from vLLM's parse of the body (its floats Python floats: `0.0`, `1.0`, `1e-07`).
 */

/** A tool schema holding integral floats and a float Python writes as `1e-07`, as a Messages and a Chat Completions body. */
const SCHEMA =
  '{"type": "object", "properties": {"scale": {"type": "number", "minimum": 0.0, "default": 1.0, "multipleOf": 1e-7}, ' +
  '"n": {"type": "integer", "maximum": 10}}}';
export const TOOL_BODIES = {
  messages: `{"model": "demo", "max_tokens": 8, "tools": [{"name": "resize", "description": "Resize", "input_schema": ${SCHEMA}}],
  "messages": [{"role": "user", "content": "Go"}]}`,
  chat: `{"model": "demo", "max_tokens": 8, "tools": [{"type": "function", "function": {"name": "resize",
  "description": "Resize", "parameters": ${SCHEMA}}}], "messages": [{"role": "user", "content": "Go"}]}`,
} as const;

/** What Python rendered for either of `TOOL_BODIES`. */
export const PYTHON_TOOLS_PROMPT =
  '<|im_start|>system\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n' +
  'You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n' +
  '{"type": "function", "function": {"name": "resize", "description": "Resize", "parameters": {"type": "object", ' +
  '"properties": {"scale": {"type": "number", "minimum": 0.0, "default": 1.0, "multipleOf": 1e-07}, ' +
  '"n": {"type": "integer", "maximum": 10}}}}}\n</tools>\n\nFor each function call, return a json object with ' +
  'function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n' +
  '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n' +
  '<|im_start|>user\nGo<|im_end|>\n<|im_start|>assistant\n';
