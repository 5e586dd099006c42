/**
 * A Messages tool_use input's numbers reach the prompt as vLLM renders them: its front end writes the input with
 * Python's `json.dumps` and its template writes the `json.loads` of that with `tojson`, so `1.0` stays `1.0`, `1e-7`
 * is `1e-07` and a 20-digit integer stays exact. The expected prompt is what Python rendered (jinja2 with the
 * transformers `tojson`, the demo model's Qwen3 template) for this body. So do a request's tool schemas' numbers, which
 * vLLM's template writes with `tojson` from its parse of the body (Messages, Chat Completions).
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parseRequestBody, routeRequestBody, type ServedModel } from '../../src/frontend/request-parse.js';
import { tokenizerJob } from '../../src/frontend/tokenize-request.js';
import { pythonToolsJson } from '../../src/common/index.js';
import { PYTHON_TOOLS_PROMPT, TOOL_BODIES } from './python-prompts.js';
import { ChatTemplate, demoTokenizerFiles, type ChatMessage } from '../../src/tokenizer/index.js';

const BODY = `{"model": "demo", "max_tokens": 64, "messages": [
 {"role": "user", "content": "Scale it"},
 {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "scale",
   "input": {"factor": 1.0, "big": 1e5, "huge": 1e16, "tiny": 1e-7, "tenth": 0.1, "id": 12345678901234567890,
     "zero": -0.0, "far": [1.5e300, 3]}}]},
 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "done"}]}
]}`;

const PYTHON_PROMPT =
  '<|im_start|>user\nScale it<|im_end|>\n<|im_start|>assistant\n<tool_call>\n' +
  '{"name": "scale", "arguments": {"factor": 1.0, "big": 100000.0, "huge": 1e+16, "tiny": 1e-07, "tenth": 0.1, ' +
  '"id": 12345678901234567890, "zero": -0.0, "far": [1.5e+300, 3]}}\n</tool_call><|im_end|>\n' +
  '<|im_start|>user\n<tool_response>\ndone\n</tool_response><|im_end|>\n<|im_start|>assistant\n';

const served = new Map<string, ServedModel>([
  [
    'demo',
    {
      port: { adapters: () => [] },
      model: {
        name: 'demo',
        loraAdapters: [],
        maxPromptTokens: 100_000,
        anthropicInlineSystem: 'preserve',
        workers: [{ id: 1 }],
      },
    },
  ],
]);

function qwen3Template(): ChatTemplate {
  const config = JSON.parse(readFileSync(demoTokenizerFiles().tokenizerConfig, 'utf8')) as { chat_template: string };
  return new ChatTemplate(config.chat_template);
}

describe('a Messages tool_use input with floats', () => {
  it('renders the prompt vLLM renders', () => {
    const parsed = parseRequestBody(BODY, 'messages', { maxMessages: 100 });
    const routed = routeRequestBody(parsed, served, {}, Buffer.from(BODY));
    if (!routed.task.ok || routed.task.task.kind !== 'chat') throw new Error('expected a chat task');
    const task = routed.task.task;
    expect(qwen3Template().render(task.messages as ChatMessage[], { tools: task.tools })).toBe(PYTHON_PROMPT);
  });

  it('is counted as that prompt by count_tokens', () => {
    const options = { maxMessages: 100, hasTokenizer: () => true, noteModel: () => {}, source: Buffer.from(BODY) };
    const job = tokenizerJob('count_tokens', JSON.parse(BODY) as Record<string, unknown>, served, options);
    if (job.kind !== 'ids' || job.task.kind !== 'chat') throw new Error('expected a chat task');
    expect(qwen3Template().render(job.task.messages as ChatMessage[])).toBe(PYTHON_PROMPT);
  });
});

describe("a tool schema's numbers", () => {
  for (const endpoint of ['messages', 'chat'] as const) {
    it(`render as vLLM renders them (${endpoint})`, () => {
      const body = TOOL_BODIES[endpoint];
      const parsed = parseRequestBody(body, endpoint, { maxMessages: 100 });
      const routed = routeRequestBody(parsed, served, {}, Buffer.from(body));
      if (!routed.task.ok || routed.task.task.kind !== 'chat') throw new Error('expected a chat task');
      const { messages, tools, toolsJson } = routed.task.task;
      expect(qwen3Template().render(messages as ChatMessage[], { tools, toolsJson })).toBe(PYTHON_TOOLS_PROMPT);
    });
  }

  it("answer a Responses tools list seen before as they did, by its tool_choice's conversion", () => {
    // Over the memo's floor (4 KB), one bound written 1.0: read from the literals, then remembered with its text.
    const tool = (i: number): string =>
      `{"type": "function", "name": "t${i}", "parameters": {"minimum": 0, "maximum": ${i === 0 ? '1.0' : i}}}`;
    const list = Array.from({ length: 80 }, (_, i) => tool(i));
    const toolsJsonOf = (choice: string): string | undefined => {
      const body = `{"model": "demo", "input": "hi", "tool_choice": "${choice}", "tools": [${list.join(', ')}]}`;
      const routed = routeRequestBody(
        parseRequestBody(body, 'responses', { maxMessages: 100 }),
        served,
        {},
        Buffer.from(body),
      );
      if (!routed.task.ok || routed.task.task.kind !== 'chat') throw new Error('expected a chat task');
      return routed.task.task.toolsJson;
    };
    const wrapped = `[${list.map((t) => `{"type": "function", "function": ${t}}`).join(', ')}]`;
    // vLLM passes no tools when the client forbids their use: the conversion keeps none.
    for (const [choice, want] of [
      ['auto', wrapped],
      ['none', undefined],
      ['auto', wrapped],
      ['none', undefined],
    ]) {
      expect(toolsJsonOf(choice as string)).toBe(want);
    }
  });

  it('need no literal where none is integral, and nothing where they print as Python does', () => {
    const tools = [{ type: 'function', function: { name: 'f', parameters: { minimum: 1e-7, maximum: 0.5 } } }];
    expect(pythonToolsJson(tools, undefined)).toBe(
      '[{"type": "function", "function": {"name": "f", "parameters": {"minimum": 1e-07, "maximum": 0.5}}}]',
    );
    expect(pythonToolsJson([{ name: 'f', parameters: { maximum: 0.5, enum: ['1.0'] } }], undefined)).toBeUndefined();
  });
});
