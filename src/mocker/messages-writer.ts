/**
 * Anthropic Messages answers (`/v1/messages`) as vLLM writes them: a `message` object, or the stream
 * `message_start`, `content_block_start`, `content_block_delta`s (`text_delta`, or `input_json_delta` for a
 * tool call), `content_block_stop`, `message_delta` (stop reason, usage) and `message_stop`. Usage follows
 * Anthropic's accounting: `input_tokens` leaves out the prompt tokens read from the cache, which are
 * `cache_read_input_tokens`.
 */
import { AgentWriter, type Piece } from './agent-writer.js';

const STOP_REASONS: Readonly<Record<string, string>> = {
  length: 'max_tokens',
  tool_calls: 'tool_use',
  stop: 'end_turn',
};

export class MessagesWriter extends AgentWriter {
  #usage(): Record<string, number> {
    return {
      input_tokens: this.promptTokens - this.cached,
      cache_creation_input_tokens: 0,
      cache_read_input_tokens: this.cached,
      output_tokens: this.generated,
    };
  }

  #stopReason(): string {
    return STOP_REASONS[this.choice.finishReason] ?? 'end_turn';
  }

  #message(content: unknown[], stopReason: string | null): Record<string, unknown> {
    return {
      id: this.meta.id,
      type: 'message',
      role: 'assistant',
      model: this.meta.model,
      content,
      stop_reason: stopReason,
      stop_sequence: null,
      usage: this.#usage(),
    };
  }

  protected piece(index: number, piece: Piece): void {
    if (index === 0) {
      this.event('message_start', {
        type: 'message_start',
        message: { ...this.#message([], null), usage: { ...this.#usage(), output_tokens: 0 } },
      });
      const block =
        piece.args === undefined
          ? { type: 'text', text: '' }
          : { type: 'tool_use', id: this.choice.toolCallId, name: this.p.toolName, input: {} };
      this.event('content_block_start', { type: 'content_block_start', index: 0, content_block: block });
    }
    const delta =
      piece.args === undefined
        ? { type: 'text_delta', text: piece.text }
        : { type: 'input_json_delta', partial_json: piece.args };
    this.event('content_block_delta', { type: 'content_block_delta', index: 0, delta });
  }

  /** Anthropic's error event: the error nested in `error`, its type Anthropic's for the status. */
  protected streamError(status: number, message: string): void {
    const type =
      status === 503 || status === 529 ? 'overloaded_error' : status >= 500 ? 'api_error' : 'invalid_request_error';
    this.event('error', { type: 'error', error: { type, message } });
  }

  protected streamEnd(): void {
    this.event('content_block_stop', { type: 'content_block_stop', index: 0 });
    this.event('message_delta', {
      type: 'message_delta',
      delta: { stop_reason: this.#stopReason(), stop_sequence: null },
      usage: this.#usage(),
    });
    this.event('message_stop', { type: 'message_stop' });
  }

  protected whole(): Record<string, unknown> {
    const { text, call } = this.answer();
    const content = call === undefined ? [{ type: 'text', text }] : [{ type: 'tool_use', ...call }];
    return this.#message(content, this.#stopReason());
  }
}
