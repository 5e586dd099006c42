/**
 * The agent APIs' non-streaming answers assembled from their streams' events (a non-streaming Messages or Responses
 * request streams from the engine, so its progress deadlines bound it). Pure: hand-written event sequences in the
 * shapes vLLM and Anthropic send.
 */
import { describe, expect, it } from 'vitest';
import { MessagesAssembler, ResponsesAssembler, type StreamAssembler } from '../../src/engines/index.js';
import { isKvgateError } from '../../src/errors/index.js';

function assemble(asm: StreamAssembler, events: unknown[]): Record<string, unknown> {
  for (const e of events) asm.push(e);
  return asm.result();
}

const start = {
  type: 'message_start',
  message: {
    id: 'msg_1',
    type: 'message',
    role: 'assistant',
    model: 'm',
    content: [],
    stop_reason: null,
    stop_sequence: null,
    usage: { input_tokens: 7, cache_creation_input_tokens: 0, cache_read_input_tokens: 32, output_tokens: 0 },
  },
};
const end = [
  {
    type: 'message_delta',
    delta: { stop_reason: 'tool_use', stop_sequence: null },
    usage: { input_tokens: null, output_tokens: 12 },
  },
  { type: 'message_stop' },
];

describe('MessagesAssembler', () => {
  it('thinking with its signature, text and a tool call by index; stop reason and usage from message_delta', () => {
    const out = assemble(new MessagesAssembler(), [
      start,
      { type: 'content_block_start', index: 0, content_block: { type: 'thinking', thinking: '', signature: '' } },
      { type: 'content_block_delta', index: 0, delta: { type: 'thinking_delta', thinking: 'Let me ' } },
      { type: 'content_block_delta', index: 0, delta: { type: 'thinking_delta', thinking: 'look.' } },
      { type: 'content_block_delta', index: 0, delta: { type: 'signature_delta', signature: 'sig==' } },
      { type: 'content_block_stop', index: 0 },
      { type: 'content_block_start', index: 1, content_block: { type: 'text', text: '' } },
      { type: 'content_block_delta', index: 1, delta: { type: 'text_delta', text: 'Listing ' } },
      { type: 'content_block_delta', index: 1, delta: { type: 'text_delta', text: 'files.' } },
      { type: 'content_block_stop', index: 1 },
      { type: 'content_block_start', index: 2, content_block: { type: 'tool_use', id: 'tu_1', name: 'ls', input: {} } },
      { type: 'content_block_delta', index: 2, delta: { type: 'input_json_delta', partial_json: '' } },
      { type: 'content_block_delta', index: 2, delta: { type: 'input_json_delta', partial_json: '{"path": ' } },
      { type: 'content_block_delta', index: 2, delta: { type: 'input_json_delta', partial_json: '"."}' } },
      { type: 'content_block_stop', index: 2 },
      ...end,
    ]);
    expect(out).toEqual({
      id: 'msg_1',
      type: 'message',
      role: 'assistant',
      model: 'm',
      content: [
        { type: 'thinking', thinking: 'Let me look.', signature: 'sig==' },
        { type: 'text', text: 'Listing files.' },
        { type: 'tool_use', id: 'tu_1', name: 'ls', input: { path: '.' } },
      ],
      stop_reason: 'tool_use',
      stop_sequence: null,
      // The start's input and cache counts kept (a null does not replace them), the output count from the delta.
      usage: { input_tokens: 7, cache_creation_input_tokens: 0, cache_read_input_tokens: 32, output_tokens: 12 },
    });
  });

  it('a tool call without input deltas keeps its start input; citations are appended', () => {
    const cite = { type: 'char_location', cited_text: 'x' };
    const out = assemble(new MessagesAssembler(), [
      start,
      { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } },
      { type: 'content_block_delta', index: 0, delta: { type: 'citations_delta', citation: cite } },
      { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'x' } },
      { type: 'content_block_start', index: 1, content_block: { type: 'tool_use', id: 't', name: 'n', input: {} } },
      ...end,
    ]);
    expect(out['content']).toEqual([
      { type: 'text', text: 'x', citations: [cite] },
      { type: 'tool_use', id: 't', name: 'n', input: {} },
    ]);
  });

  it("a tool call's input that is not JSON: KVG_ERR_ENGINE_BAD_RESPONSE", () => {
    const asm = new MessagesAssembler();
    for (const e of [
      start,
      { type: 'content_block_start', index: 0, content_block: { type: 'tool_use', id: 't', name: 'n', input: {} } },
      { type: 'content_block_delta', index: 0, delta: { type: 'input_json_delta', partial_json: '{"path": ' } },
      ...end,
    ])
      asm.push(e);
    let thrown: unknown;
    try {
      asm.result();
    } catch (err) {
      thrown = err;
    }
    expect(isKvgateError(thrown, 'KVG_ERR_ENGINE_BAD_RESPONSE')).toBe(true);
  });
});

describe('heldBytes: what an answer holds, the bound of a stream: false answer (the per-event framing left out)', () => {
  it('Messages: the pieces it concatenates, and the other events whole', () => {
    const asm = new MessagesAssembler();
    asm.push(start, 300);
    asm.push({ type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } }, 80);
    for (let i = 0; i < 1000; i++)
      asm.push({ type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'abcd' } }, 90);
    asm.push({ type: 'content_block_delta', index: 1, delta: { type: 'input_json_delta', partial_json: '{}' } }, 90);
    expect(asm.heldBytes).toBe(300 + 80 + 4000 + 2);
  });

  it('Responses: the event whose response it keeps, replaced by the next one', () => {
    const asm = new ResponsesAssembler();
    asm.push({ type: 'response.created', response: { id: 'r' } }, 100);
    asm.push({ type: 'response.output_text.delta', delta: 'abcd' }, 90);
    expect(asm.heldBytes).toBe(100);
    asm.push({ type: 'response.completed', response: { id: 'r', output: [] } }, 700);
    expect(asm.heldBytes).toBe(700);
  });
});

describe('ResponsesAssembler', () => {
  it('the response of the final event, whole', () => {
    const done = {
      id: 'resp_1',
      object: 'response',
      status: 'completed',
      output: [{ type: 'message', content: [{ type: 'output_text', text: 'Hi there.' }] }],
      usage: { input_tokens: 5, output_tokens: 3, total_tokens: 8 },
    };
    const out = assemble(new ResponsesAssembler(), [
      { type: 'response.created', sequence_number: 0, response: { id: 'resp_1', status: 'in_progress', output: [] } },
      { type: 'response.in_progress', sequence_number: 1, response: { id: 'resp_1', status: 'in_progress' } },
      { type: 'response.output_text.delta', sequence_number: 2, item_id: 'msg_1', delta: 'Hi there.' },
      { type: 'response.completed', sequence_number: 3, response: done },
    ]);
    expect(out).toEqual(done);
  });
});
