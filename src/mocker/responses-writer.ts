/**
 * OpenAI Responses answers (`/v1/responses`) as vLLM writes them (non-Harmony models): a `response` object whose
 * `output` holds one `message` item (an `output_text` part) or one `function_call` item, or the stream
 * `response.created`, `response.in_progress`, `response.output_item.added`, then for text
 * `response.content_part.added`, `response.output_text.delta`s, `response.output_text.done`,
 * `response.content_part.done` (for a tool call `response.function_call_arguments.delta`s and `.done`), then
 * `response.output_item.done` and `response.completed`, each event with its `sequence_number`. A response cut
 * by `max_output_tokens` is `incomplete` (`incomplete_details.reason`), any other `completed`. Usage carries the cached prompt tokens in
 * `input_tokens_details.cached_tokens`.
 */
import { AgentWriter, type Piece } from './agent-writer.js';

export class ResponsesWriter extends AgentWriter {
  #seq = 0;
  #text = '';
  #args = '';

  get #itemId(): string {
    return `${this.choice.toolCallId === undefined ? 'msg' : 'fc'}_${this.meta.id.slice(5)}`;
  }

  protected override event(type: string, data: Record<string, unknown>): void {
    super.event(type, { type, sequence_number: this.#seq++, ...data });
  }

  #usage(): Record<string, unknown> {
    return {
      input_tokens: this.promptTokens,
      input_tokens_details: { cached_tokens: this.cached },
      output_tokens: this.generated,
      output_tokens_details: { reasoning_tokens: 0 },
      total_tokens: this.promptTokens + this.generated,
    };
  }

  #item(done: boolean): Record<string, unknown> {
    const status = done ? 'completed' : 'in_progress';
    const id = this.#itemId;
    const callId = this.choice.toolCallId;
    if (callId !== undefined) {
      return {
        id,
        type: 'function_call',
        call_id: callId,
        name: this.p.toolName,
        arguments: done ? this.#args : '',
        status,
      };
    }
    const content = done ? [{ type: 'output_text', text: this.#text, annotations: [], logprobs: [] }] : [];
    return { id, type: 'message', role: 'assistant', status, content };
  }

  /**
   * The response object, in progress or `done`; done, it is `incomplete` only where max_output_tokens cut the answer
   * (vLLM's rule: the finish reason `length`), else `completed` (a tool call ends its answer).
   */
  #response(done: boolean, output: unknown[]): Record<string, unknown> {
    const cut = done && this.choice.finishReason === 'length';
    return {
      id: this.meta.id,
      object: 'response',
      created_at: this.meta.created,
      model: this.meta.model,
      status: !done ? 'in_progress' : cut ? 'incomplete' : 'completed',
      incomplete_details: cut ? { reason: 'max_output_tokens' } : null,
      error: null,
      output,
      parallel_tool_calls: true,
      tool_choice: 'auto',
      tools: [],
      text: { format: { type: 'text' } },
      usage: done ? this.#usage() : null,
    };
  }

  protected piece(index: number, piece: Piece): void {
    const at = { item_id: this.#itemId, output_index: 0 };
    if (index === 0) {
      this.event('response.created', { response: this.#response(false, []) });
      this.event('response.in_progress', { response: this.#response(false, []) });
      this.event('response.output_item.added', { output_index: 0, item: this.#item(false) });
      if (piece.args === undefined) {
        const part = { type: 'output_text', text: '', annotations: [] };
        this.event('response.content_part.added', { ...at, content_index: 0, part });
      }
    }
    if (piece.args === undefined) {
      this.#text += piece.text;
      this.event('response.output_text.delta', { ...at, content_index: 0, delta: piece.text, logprobs: [] });
    } else {
      this.#args += piece.args;
      this.event('response.function_call_arguments.delta', { ...at, delta: piece.args });
    }
  }

  /** The Responses API's error event: code (the status) and message at the top level, the next sequence number. */
  protected streamError(status: number, message: string): void {
    this.event('error', { code: String(status), message, param: null });
  }

  protected streamEnd(): void {
    const at = { item_id: this.#itemId, output_index: 0 };
    if (this.choice.toolCallId === undefined) {
      this.event('response.output_text.done', { ...at, content_index: 0, text: this.#text, logprobs: [] });
      const part = { type: 'output_text', text: this.#text, annotations: [] };
      this.event('response.content_part.done', { ...at, content_index: 0, part });
    } else {
      this.event('response.function_call_arguments.done', { ...at, arguments: this.#args });
    }
    const item = this.#item(true);
    this.event('response.output_item.done', { output_index: 0, item });
    this.event('response.completed', { response: this.#response(true, [item]) });
  }

  protected whole(): Record<string, unknown> {
    const { text } = this.answer();
    this.#text = text;
    const args = this.choice.whole().message['tool_calls'] as { function: { arguments: string } }[] | undefined;
    this.#args = args?.[0]?.function.arguments ?? '';
    return this.#response(true, [this.#item(true)]);
  }
}
