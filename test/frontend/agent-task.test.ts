/**
 * Conversion equality: an Anthropic Messages or OpenAI Responses request is routed on the tokens of the chat
 * request vLLM's own front end runs it as. Each case pairs a request with that chat request written out by hand
 * (vLLM's conversion rules); both go through the same preprocessing (the bundled Qwen3 template and tokenizer)
 * and must give the same token ids. Bad input is refused with a stable code naming the field.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { InlineSystemMode } from '../../src/common/index.js';
import { agentChatTask, checkAgentBody, type AgentApi } from '../../src/frontend/agent-task.js';
import { tokenizerJob } from '../../src/frontend/tokenize-request.js';
import { createPreprocessor, type Preprocessor } from '../../src/frontend/preprocess/preprocessor.js';
import type { ChatTask, PreprocessModelSpec } from '../../src/frontend/preprocess/protocol.js';
import { isKvgateError, type KvgateErrorCode } from '../../src/errors/index.js';
import { Tokenizer } from 'tokenizers';
import { ChatTemplate, demoTokenizerFiles, type ChatMessage } from '../../src/tokenizer/index.js';
import { kvgateErrorOf } from '../helpers/kvgate-error.js';

const spec: PreprocessModelSpec = {
  name: 'demo',
  blockSize: 16,
  tokenizer: { kind: 'demo' },
  segmentCacheTokens: 0,
  segmentCacheBytes: 0,
};

type Json = Record<string, unknown>;
interface Case {
  name: string;
  api: AgentApi;
  body: Json;
  chat: { messages: Json[]; tools?: Json[]; continueFinalMessage?: boolean; chatTemplateKwargs?: Json };
  /** The model's `anthropic_inline_system` (default `preserve`). */
  inlineSystem?: InlineSystemMode;
}

const lsSchema = { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] };
const shellSchema = { type: 'object', properties: { cmd: { type: 'array', items: { type: 'string' } } } };

const CASES: Case[] = [
  {
    name: 'messages: system as a string, one user turn',
    api: 'messages',
    body: { model: 'demo', max_tokens: 64, system: 'You are terse.', messages: [{ role: 'user', content: 'Hi' }] },
    chat: {
      messages: [
        { role: 'system', content: 'You are terse.' },
        { role: 'user', content: 'Hi' },
      ],
    },
  },
  {
    name: 'messages: system blocks (billing header dropped, joined with no separator), tools, tool use and result',
    api: 'messages',
    body: {
      model: 'demo',
      max_tokens: 4096,
      system: [
        { type: 'text', text: 'x-anthropic-billing-header: cc_version=2.1.200.abc; cch=1f2e3;' },
        { type: 'text', text: 'You are a coding agent.' },
        { type: 'text', text: ' Be terse.', cache_control: { type: 'ephemeral' } },
      ],
      messages: [
        { role: 'user', content: 'List files' },
        {
          role: 'assistant',
          content: [
            { type: 'thinking', thinking: 'Use the ls tool.', signature: 'sig' },
            { type: 'text', text: 'Listing.' },
            { type: 'tool_use', id: 'toolu_01', name: 'ls', input: { path: '.', deep: [1, { ü: true }] } },
          ],
        },
        {
          role: 'user',
          content: [
            {
              type: 'tool_result',
              tool_use_id: 'toolu_01',
              content: [
                { type: 'text', text: 'a.py' },
                { type: 'text', text: 'b.py' },
              ],
            },
            { type: 'text', text: 'Now open a.py' },
          ],
        },
      ],
      tools: [{ name: 'ls', description: 'list dir', input_schema: lsSchema }],
      metadata: { user_id: 'session-42' },
    },
    chat: {
      messages: [
        { role: 'system', content: 'You are a coding agent. Be terse.' },
        { role: 'user', content: 'List files' },
        {
          role: 'assistant',
          content: 'Listing.',
          reasoning_content: 'Use the ls tool.',
          tool_calls: [
            {
              id: 'toolu_01',
              type: 'function',
              function: { name: 'ls', arguments: '{"path": ".", "deep": [1, {"ü": true}]}' },
            },
          ],
        },
        { role: 'tool', tool_call_id: 'toolu_01', content: 'a.py\nb.py' },
        { role: 'user', content: 'Now open a.py' },
      ],
      tools: [{ type: 'function', function: { name: 'ls', description: 'list dir', parameters: lsSchema } }],
    },
  },
  {
    name: "messages: Claude Code's system messages inside messages (a leading one joins the system prompt, later ones stay system turns), ctx as user",
    api: 'messages',
    body: {
      model: 'demo',
      max_tokens: 64,
      system: 'You are a coding agent.',
      messages: [
        { role: 'system', content: 'Project rules.' },
        { role: 'user', content: 'Fix the bug' },
        { role: 'ctx', content: 'git status: clean' },
        { role: 'system', content: [{ type: 'text', text: 'Available agent types: general.' }] },
      ],
    },
    chat: {
      messages: [
        { role: 'system', content: 'You are a coding agent.\n\nProject rules.' },
        { role: 'user', content: 'Fix the bug' },
        { role: 'user', content: 'git status: clean' },
        { role: 'system', content: 'Available agent types: general.' },
      ],
    },
  },
  {
    name: 'messages: anthropic_inline_system fold, a system message after a tool result folds into it',
    api: 'messages',
    inlineSystem: 'fold',
    body: {
      model: 'demo',
      max_tokens: 64,
      system: 'You are a coding agent.',
      messages: [
        { role: 'user', content: 'List files' },
        { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_1', name: 'ls', input: { path: '.' } }] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: 'a.py' }] },
        { role: 'system', content: 'Reminder: be terse.' },
      ],
    },
    chat: {
      messages: [
        { role: 'system', content: 'You are a coding agent.' },
        { role: 'user', content: 'List files' },
        {
          role: 'assistant',
          tool_calls: [{ id: 'toolu_1', type: 'function', function: { name: 'ls', arguments: '{"path": "."}' } }],
        },
        { role: 'tool', tool_call_id: 'toolu_1', content: 'a.py\n\nReminder: be terse.' },
      ],
    },
  },
  {
    name: 'messages: multi-turn, two tool results in one turn, a user turn of tool results only, empty text dropped',
    api: 'messages',
    body: {
      model: 'demo',
      max_tokens: 100,
      messages: [
        { role: 'user', content: [{ type: 'text', text: 'Read both files' }] },
        {
          role: 'assistant',
          content: [
            { type: 'tool_use', id: 't1', name: 'read', input: { path: 'a' } },
            { type: 'tool_use', id: 't2', name: 'read', input: { path: 'b' } },
          ],
        },
        {
          role: 'user',
          content: [
            { type: 'tool_result', tool_use_id: 't1', content: 'A' },
            { type: 'tool_result', tool_use_id: 't2', content: [{ type: 'text', text: 'B' }], is_error: true },
          ],
        },
        {
          role: 'assistant',
          content: [
            { type: 'text', text: '' },
            { type: 'text', text: 'Both read.' },
          ],
        },
        {
          role: 'user',
          content: [
            { type: 'text', text: 'Thanks.' },
            { type: 'text', text: 'Summarise.' },
          ],
        },
      ],
      tools: [{ name: 'read', input_schema: { properties: { path: { type: 'string' } } } }],
    },
    chat: {
      messages: [
        { role: 'user', content: 'Read both files' },
        {
          role: 'assistant',
          tool_calls: [
            { id: 't1', type: 'function', function: { name: 'read', arguments: '{"path": "a"}' } },
            { id: 't2', type: 'function', function: { name: 'read', arguments: '{"path": "b"}' } },
          ],
        },
        { role: 'tool', tool_call_id: 't1', content: 'A' },
        { role: 'tool', tool_call_id: 't2', content: 'B' },
        { role: 'assistant', content: 'Both read.' },
        {
          role: 'user',
          content: [
            { type: 'text', text: 'Thanks.' },
            { type: 'text', text: 'Summarise.' },
          ],
        },
      ],
      tools: [
        {
          type: 'function',
          function: { name: 'read', parameters: { properties: { path: { type: 'string' } }, type: 'object' } },
        },
      ],
    },
  },
  {
    name: 'responses: input as text with instructions',
    api: 'responses',
    body: { model: 'demo', instructions: 'You are Codex.', input: 'Say hi' },
    chat: {
      messages: [
        { role: 'system', content: 'You are Codex.' },
        { role: 'user', content: 'Say hi' },
      ],
    },
  },
  {
    name: 'responses: items (message, reasoning, function call and output, assistant message), function tools',
    api: 'responses',
    body: {
      model: 'demo',
      instructions: 'You are Codex.',
      input: [
        { type: 'message', role: 'developer', content: 'Work in /repo.' },
        { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'run ls' }] },
        { type: 'reasoning', id: 'rs_1', summary: [], content: [{ type: 'reasoning_text', text: 'call shell' }] },
        { type: 'function_call', call_id: 'call_A', name: 'shell', arguments: '{"cmd":["ls"]}' },
        { type: 'function_call_output', call_id: 'call_A', output: 'a.py' },
        { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'One file: a.py.' }] },
        { role: 'user', content: 'Open it' },
      ],
      tools: [{ type: 'function', name: 'shell', description: 'run', parameters: shellSchema, strict: false }],
      store: false,
      background: false,
      prompt_cache_key: 'conv-1',
    },
    chat: {
      messages: [
        { role: 'system', content: 'You are Codex.' },
        { role: 'developer', content: 'Work in /repo.' },
        { role: 'user', content: [{ type: 'text', text: 'run ls' }] },
        {
          role: 'assistant',
          reasoning_content: 'call shell',
          tool_calls: [{ id: 'call_A', type: 'function', function: { name: 'shell', arguments: '{"cmd":["ls"]}' } }],
        },
        { role: 'tool', tool_call_id: 'call_A', content: 'a.py' },
        { role: 'assistant', content: 'One file: a.py.' },
        { role: 'user', content: 'Open it' },
      ],
      tools: [
        {
          type: 'function',
          function: { type: 'function', name: 'shell', description: 'run', parameters: shellSchema, strict: false },
        },
      ],
    },
  },
  {
    name: 'responses: an unfinished assistant message is continued',
    api: 'responses',
    body: {
      model: 'demo',
      input: [
        { role: 'user', content: 'Count to 5' },
        { type: 'message', role: 'assistant', status: 'incomplete', content: [{ type: 'output_text', text: '1, 2,' }] },
      ],
    },
    chat: {
      messages: [
        { role: 'user', content: 'Count to 5' },
        { role: 'assistant', content: '1, 2,' },
      ],
      continueFinalMessage: true,
    },
  },
  {
    // Qwen3's template reads enable_thinking: false opens the answer with a closed, empty think block.
    name: "responses: reasoning effort none (the template's enable_thinking false), as a chat's reasoning_effort",
    api: 'responses',
    body: { model: 'demo', input: 'Say hi', reasoning: { effort: 'none' } },
    chat: {
      messages: [{ role: 'user', content: 'Say hi' }],
      chatTemplateKwargs: { reasoning_effort: 'none', enable_thinking: false },
    },
  },
];

function chatTask(chat: Case['chat']): ChatTask {
  return {
    kind: 'chat',
    model: 'demo',
    maxPromptTokens: 100_000,
    messages: chat.messages,
    tools: chat.tools,
    addGenerationPrompt: chat.continueFinalMessage ? false : undefined,
    continueFinalMessage: chat.continueFinalMessage,
    chatTemplateKwargs: chat.chatTemplateKwargs,
  };
}

describe('agent APIs: conversion to the chat request the engine runs', () => {
  let pre: Preprocessor;
  beforeAll(async () => {
    pre = await createPreprocessor([spec], { threads: 0 });
  });
  afterAll(async () => {
    await pre?.close();
  });

  it.each(CASES)('$name: the same token ids as the equivalent chat request', async (c) => {
    const agent = await pre.run(
      agentChatTask({
        api: c.api,
        body: c.body,
        model: 'demo',
        maxPromptTokens: 100_000,
        loraName: undefined,
        inlineSystem: c.inlineSystem,
      }),
    );
    const chat = await pre.run(chatTask(c.chat));
    expect(Array.from(agent.tokenIds)).toEqual(Array.from(chat.tokenIds));
    expect(agent.hashes.seq).toEqual(chat.hashes.seq);
  });

  it('renders what the conversion promises: the tool result as a tool response, no billing header', async () => {
    const tok = Tokenizer.fromFile(demoTokenizerFiles().tokenizerJson);
    const ids = (
      await pre.run(
        agentChatTask({
          api: 'messages',
          body: CASES[1]!.body,
          model: 'demo',
          maxPromptTokens: 100_000,
          loraName: undefined,
        }),
      )
    ).tokenIds;
    const text = await tok.decode(Array.from(ids), false);
    expect(text).toContain('<|im_start|>system\nYou are a coding agent. Be terse.');
    expect(text).toContain('<tool_response>\na.py\nb.py\n</tool_response>');
    expect(text).toContain('{"path": ".", "deep": [1, {"ü": true}]}');
    expect(text).not.toContain('billing');
  });
});

/** A PDF as Anthropic's clients send one (a document block with a base64 source). */
const PDF = { type: 'document', source: { type: 'base64', media_type: 'application/pdf', data: 'JVBERi0xLjQK' } };

const BAD: { name: string; api: AgentApi; body: Json; code: KvgateErrorCode; param: string }[] = [
  {
    name: 'messages without max_tokens',
    api: 'messages',
    body: { model: 'demo', messages: [{ role: 'user', content: 'x' }] },
    code: 'KVG_ERR_INVALID_REQUEST',
    param: 'max_tokens',
  },
  {
    name: 'messages with no message',
    api: 'messages',
    body: { model: 'demo', max_tokens: 5, system: 'be terse', messages: [] },
    code: 'KVG_ERR_INVALID_REQUEST',
    param: 'messages',
  },
  {
    name: 'responses with an empty input list',
    api: 'responses',
    body: { model: 'demo', instructions: 'be terse', input: [] },
    code: 'KVG_ERR_INVALID_REQUEST',
    param: 'input',
  },
  {
    name: 'a role of none of the Messages roles',
    api: 'messages',
    body: {
      model: 'demo',
      max_tokens: 5,
      messages: [
        { role: 'user', content: 'x' },
        { role: 'tool', content: 'y' },
      ],
    },
    code: 'KVG_ERR_INVALID_REQUEST',
    param: 'messages[1].role',
  },
  {
    name: 'a block type kvgate does not convert',
    api: 'messages',
    body: { model: 'demo', max_tokens: 5, messages: [{ role: 'user', content: [{ type: 'video', text: 'x' }] }] },
    code: 'KVG_ERR_INVALID_CONTENT_BLOCK',
    param: 'messages[0].content[0].type',
  },
  {
    name: 'a text block without text',
    api: 'messages',
    body: { model: 'demo', max_tokens: 5, messages: [{ role: 'user', content: [{ type: 'text' }] }] },
    code: 'KVG_ERR_INVALID_CONTENT_BLOCK',
    param: 'messages[0].content[0].text',
  },
  {
    name: 'a block that is not an object',
    api: 'messages',
    body: { model: 'demo', max_tokens: 5, messages: [{ role: 'assistant', content: ['hi'] }] },
    code: 'KVG_ERR_INVALID_CONTENT_BLOCK',
    param: 'messages[0].content[0]',
  },
  {
    name: 'a tool_use block whose input is not an object',
    api: 'messages',
    body: {
      model: 'demo',
      max_tokens: 5,
      messages: [{ role: 'assistant', content: [{ type: 'tool_use', id: 't', name: 'f', input: '{}' }] }],
    },
    code: 'KVG_ERR_INVALID_CONTENT_BLOCK',
    param: 'messages[0].content[0].input',
  },
  {
    name: 'a system block that is not text',
    api: 'messages',
    body: { model: 'demo', max_tokens: 5, system: [{ type: 'image' }], messages: [{ role: 'user', content: 'x' }] },
    code: 'KVG_ERR_INVALID_CONTENT_BLOCK',
    param: 'system[0]',
  },
  {
    name: 'an image block',
    api: 'messages',
    body: { model: 'demo', max_tokens: 5, messages: [{ role: 'user', content: [{ type: 'image', source: {} }] }] },
    code: 'KVG_ERR_UNSUPPORTED_CONTENT',
    param: 'messages[0].content[0].type',
  },
  {
    // Claude Code sends a PDF it reads as a document block: not text, refused as an image is (before: "not a
    // Messages API content block type", KVG_ERR_INVALID_CONTENT_BLOCK).
    name: 'a document block (a PDF)',
    api: 'messages',
    body: {
      model: 'demo',
      max_tokens: 5,
      messages: [{ role: 'user', content: [{ type: 'text', text: 'Read it.' }, PDF] }],
    },
    code: 'KVG_ERR_UNSUPPORTED_CONTENT',
    param: 'messages[0].content[1].type',
  },
  {
    name: "a document in a tool result's content",
    api: 'messages',
    body: {
      model: 'demo',
      max_tokens: 5,
      messages: [
        { role: 'user', content: 'Read report.pdf.' },
        {
          role: 'assistant',
          content: [{ type: 'tool_use', id: 't1', name: 'Read', input: { file_path: 'report.pdf' } }],
        },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 't1', content: [PDF] }] },
      ],
    },
    code: 'KVG_ERR_UNSUPPORTED_CONTENT',
    param: 'messages[2].content[0].content[0].type',
  },
  {
    name: 'a role the Messages API does not have',
    api: 'messages',
    body: { model: 'demo', max_tokens: 5, messages: [{ role: 'tool', content: 'x' }] },
    code: 'KVG_ERR_INVALID_REQUEST',
    param: 'messages[0].role',
  },
  {
    name: 'responses without input',
    api: 'responses',
    body: { model: 'demo' },
    code: 'KVG_ERR_INVALID_REQUEST',
    param: 'input',
  },
  {
    name: 'an unknown input item type',
    api: 'responses',
    body: { model: 'demo', input: [{ type: 'web_search_call', id: 'x' }] },
    code: 'KVG_ERR_INVALID_CONTENT_BLOCK',
    param: 'input[0].type',
  },
  {
    name: 'a function call without call_id',
    api: 'responses',
    body: { model: 'demo', input: [{ type: 'function_call', name: 'f', arguments: '{}' }] },
    code: 'KVG_ERR_INVALID_CONTENT_BLOCK',
    param: 'input[0].call_id',
  },
  {
    name: 'encrypted reasoning',
    api: 'responses',
    body: { model: 'demo', input: [{ type: 'reasoning', summary: [], encrypted_content: 'gAAA' }] },
    code: 'KVG_ERR_INVALID_CONTENT_BLOCK',
    param: 'input[0].encrypted_content',
  },
  {
    name: 'previous_response_id',
    api: 'responses',
    body: { model: 'demo', input: 'more', previous_response_id: 'resp_1' },
    code: 'KVG_ERR_PREVIOUS_RESPONSE_UNSUPPORTED',
    param: 'previous_response_id',
  },
  {
    name: 'background: true (a queued response is read back from a store kvgate does not serve)',
    api: 'responses',
    body: { model: 'demo', input: 'more', background: true },
    code: 'KVG_ERR_BACKGROUND_UNSUPPORTED',
    param: 'background',
  },
  {
    name: 'a background that is not a boolean',
    api: 'responses',
    body: { model: 'demo', input: 'more', background: 'yes' },
    code: 'KVG_ERR_INVALID_REQUEST',
    param: 'background',
  },
  {
    name: 'an output_config that is not an object',
    api: 'messages',
    body: { model: 'demo', max_tokens: 5, messages: [{ role: 'user', content: 'x' }], output_config: 'high' },
    code: 'KVG_ERR_INVALID_REQUEST',
    param: 'output_config',
  },
  {
    name: "an effort outside vLLM's Messages set ('none' is chat's, not Messages')",
    api: 'messages',
    body: {
      model: 'demo',
      max_tokens: 5,
      messages: [{ role: 'user', content: 'x' }],
      output_config: { effort: 'none' },
    },
    code: 'KVG_ERR_INVALID_REQUEST',
    param: 'output_config.effort',
  },
  {
    name: 'a reasoning that is not an object',
    api: 'responses',
    body: { model: 'demo', input: 'x', reasoning: 'high' },
    code: 'KVG_ERR_INVALID_REQUEST',
    param: 'reasoning',
  },
  {
    name: 'a reasoning effort that is not a string',
    api: 'responses',
    body: { model: 'demo', input: 'x', reasoning: { effort: 3 } },
    code: 'KVG_ERR_INVALID_REQUEST',
    param: 'reasoning.effort',
  },
  {
    name: 'a tool that is not a tool object',
    api: 'responses',
    body: { model: 'demo', input: 'x', tools: ['shell'] },
    code: 'KVG_ERR_INVALID_REQUEST',
    param: 'tools[0]',
  },
];

describe('agent APIs: bad input', () => {
  it.each(BAD)('$name: $code naming $param', ({ api, body, code, param }) => {
    let error: unknown;
    try {
      agentChatTask({ api, body, model: 'demo', maxPromptTokens: 1000, loraName: undefined });
    } catch (e) {
      error = e;
    }
    expect(isKvgateError(error, code)).toBe(true);
    expect((error as { detail: Json }).detail.param).toBe(param);
    expect((error as Error).message.startsWith(param)).toBe(true);
  });
});

/**
 * What an agent body shares with a chat's is checked before routing reads it (the audit's crash: an `nvext` of the
 * wrong shape reached the hints parser unchecked, and `token_data: {length: 1e9}` allocated a billion-entry array).
 */
describe('agent APIs: the checks before the model is looked up (checkAgentBody)', () => {
  const base = { model: 'demo', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }], input: 'hi' };
  const cases: [string, Json, string][] = [
    ['token_data that is not a list', { nvext: { token_data: { length: 1_000_000_000 } } }, 'nvext.token_data'],
    ['annotations that are not a list', { nvext: { annotations: 'x' } }, 'nvext.annotations'],
    ['allowed_worker_ids that are not a list', { nvext: { allowed_worker_ids: 5 } }, 'nvext.allowed_worker_ids'],
    [
      'required_taints that are not a list',
      { nvext: { routing_constraints: { required_taints: 5 } } },
      'nvext.routing_constraints.required_taints',
    ],
    [
      'a session id over 256 characters',
      { nvext: { session_control: { session_id: 's'.repeat(257) } } },
      'nvext.session_control.session_id',
    ],
    [
      'a session timeout that is not a number',
      { nvext: { session_control: { session_id: 's', timeout: 'x' } } },
      'nvext.session_control.timeout',
    ],
    ['a model name over 256 characters', { model: 'm'.repeat(257) }, 'model'],
    ['an empty cache salt', { cache_salt: '' }, 'cache_salt'],
    ['a stream flag that is not a boolean', { stream: 'yes' }, 'stream'],
  ];
  for (const api of ['messages', 'responses'] as const) {
    it.each(cases)(`${api}: %s is a 400 naming the field`, (_name, extra, param) => {
      const error = kvgateErrorOf(() => checkAgentBody(api, { ...base, ...extra }, { maxMessages: 100 }));
      expect(error.code).toBe('KVG_ERR_INVALID_REQUEST');
      expect(error.detail?.param).toBe(param);
    });

    if (api === 'messages')
      it('messages: tool results count as the chat messages they become, against max_messages', () => {
        const results = (n: number) => ({
          role: 'user',
          content: Array.from({ length: n }, (_, i) => ({ type: 'tool_result', tool_use_id: `t${i}`, content: 'ok' })),
        });
        const error = kvgateErrorOf(() =>
          checkAgentBody('messages', { ...base, messages: [results(100)] }, { maxMessages: 100 }),
        );
        expect(error.code).toBe('KVG_ERR_TOO_MANY_MESSAGES');
        expect(error.detail).toMatchObject({ param: 'messages', messages: 101 });
        expect(() =>
          checkAgentBody('messages', { ...base, messages: [results(99)] }, { maxMessages: 100 }),
        ).not.toThrow();
      });

    it(`${api}: a body of more than 1,024 top-level members is refused`, () => {
      const wide: Json = { ...base };
      for (let i = 0; i < 2000; i++) wide[`x${i}`] = i;
      expect(() => checkAgentBody(api, wide, { maxMessages: 100 })).toThrow(
        /request body must NOT have more than 1024 properties/,
      );
      expect(() => checkAgentBody(api, { ...base }, { maxMessages: 100 })).not.toThrow();
    });
  }
});

describe("agent APIs: a cache salt, as vLLM's front ends take it", () => {
  it('salts a Responses request (vLLM passes its cache_salt on), never a Messages one (vLLM has no such field)', () => {
    const task = (api: AgentApi, body: Json) =>
      agentChatTask({ api, body, model: 'demo', maxPromptTokens: 1000, loraName: undefined });
    const messages = { model: 'demo', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }], cache_salt: 't' };
    expect(task('messages', messages).cacheSalt).toBeUndefined();
    expect(task('responses', { model: 'demo', input: 'hi', cache_salt: 't' }).cacheSalt).toBe('t');
  });
});

/**
 * The effort an agent request asks for reaches the template as a chat completion's `reasoning_effort` does
 * (template-kwargs.ts): vLLM sets the chat request's `reasoning_effort` from a Messages request's
 * `output_config.effort` (not for count_tokens), and its Responses request passes `reasoning.effort` with its own
 * `chat_template_kwargs` by the same rule.
 */
describe("agent APIs: the reasoning effort, as vLLM's front ends pass it to the template", () => {
  const kwargsOf = (api: AgentApi, extra: Json): Json | undefined => {
    const body =
      api === 'messages'
        ? { model: 'demo', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }], ...extra }
        : { model: 'demo', input: 'hi', ...extra };
    return agentChatTask({ api, body, model: 'demo', maxPromptTokens: 1000, loraName: undefined }).chatTemplateKwargs;
  };

  it("messages: output_config.effort as reasoning_effort and enable_thinking, the request's kwargs winning", () => {
    expect(kwargsOf('messages', {})).toBeUndefined();
    expect(kwargsOf('messages', { output_config: { effort: 'low' } })).toEqual({
      reasoning_effort: 'low',
      enable_thinking: true,
    });
    expect(
      kwargsOf('messages', {
        output_config: { effort: 'max' },
        chat_template_kwargs: { enable_thinking: false, x: 1 },
      }),
    ).toEqual({ enable_thinking: false, x: 1, reasoning_effort: 'max' });
    // No effort: the request's kwargs alone. `thinking` is Anthropic's, which vLLM does not map.
    expect(kwargsOf('messages', { output_config: { effort: null }, chat_template_kwargs: { x: 1 } })).toEqual({ x: 1 });
    expect(kwargsOf('messages', { output_config: { format: { type: 'json_schema' } } })).toBeUndefined();
    expect(kwargsOf('messages', { thinking: { type: 'enabled', budget_tokens: 1024 } })).toBeUndefined();
  });

  it("responses: reasoning.effort by the same rule, with the request's chat_template_kwargs", () => {
    expect(kwargsOf('responses', { reasoning: { effort: 'none' } })).toEqual({
      reasoning_effort: 'none',
      enable_thinking: false,
    });
    expect(
      kwargsOf('responses', { reasoning: { effort: 'high' }, chat_template_kwargs: { enable_thinking: false } }),
    ).toEqual({ enable_thinking: false, reasoning_effort: 'high' });
    expect(kwargsOf('responses', { reasoning: { summary: 'auto' }, chat_template_kwargs: { x: 1 } })).toEqual({ x: 1 });
    expect(kwargsOf('responses', { reasoning: null })).toBeUndefined();
  });

  it('so a template that reads them renders as the engine does', () => {
    const template = new ChatTemplate(
      '{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}<assistant>' +
        '{% if enable_thinking %}<think {{ reasoning_effort }}>{% endif %}',
    );
    const messages = [{ role: 'user', content: 'hi' }] as ChatMessage[];
    const render = (api: AgentApi, extra: Json): string => template.render(messages, { extra: kwargsOf(api, extra) });
    expect(render('messages', { output_config: { effort: 'low' } })).toBe('<user>hi<assistant><think low>');
    expect(render('responses', { reasoning: { effort: 'medium' } })).toBe('<user>hi<assistant><think medium>');
    expect(render('responses', { reasoning: { effort: 'none' } })).toBe('<user>hi<assistant>');
  });

  it('count_tokens counts without the effort, as vLLM does (its count request has no output_config)', () => {
    const served = new Map([
      [
        'demo',
        {
          port: { adapters: () => [] },
          model: { name: 'demo', loraAdapters: [], anthropicInlineSystem: 'preserve' as const },
        },
      ],
    ]);
    const options = { maxMessages: 100, hasTokenizer: () => true, noteModel: () => {} };
    const count = (extra: Json) => {
      const body = { model: 'demo', messages: [{ role: 'user', content: 'hi' }], ...extra };
      const job = tokenizerJob('count_tokens', body, served, options);
      return job.kind === 'ids' && job.task.kind === 'chat' ? job.task.chatTemplateKwargs : 'not a chat task';
    };
    expect(count({ output_config: { effort: 'low' } })).toBeUndefined();
    // Not checked either: vLLM's count request ignores the field.
    expect(count({ output_config: { effort: 'none' }, chat_template_kwargs: { x: 1 } })).toEqual({ x: 1 });
  });
});
