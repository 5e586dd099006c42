/**
 * The answers of the simulated engine's agent endpoints (`/v1/messages`, `/v1/responses`), written as vLLM's
 * front ends write them over the same generation a chat completion runs: the shared part here (the answer's text
 * or tool call, token by token, through ChoiceOutput; named SSE events), each API's shapes in
 * messages-writer.ts and responses-writer.ts.
 *
 * Contract: the same interface as ResponseWriter (`open`, `token`, `finish`), so generation drives either; the
 * stream's pieces, merged as a client merges them, equal the unstreamed answer. The faults that cut an answer
 * apply as they do to a chat's (`stallAfterTokens`: that many tokens written, then nothing, the connection open;
 * `errorAfterTokens`, streams only: that many, then the API's own error event and the end of the stream).
 */
import type { ServerResponse } from 'node:http';
import { sendJson } from '../common/index.js';
import { ChoiceOutput } from './choice-output.js';
import type { GenerateRequest, ResponseMeta, Usage } from './openai-protocol.js';
import type { StreamFailure } from './response-writer.js';

/** What generation drives: ResponseWriter, or an agent API's writer. */
export interface AnswerWriter {
  open(): void;
  token(tokenId: number, piece: string, index: number, cached: number): void;
  finish(u: Usage, kvTransferParams: () => unknown): void;
}

const SSE_HEADERS = {
  'content-type': 'text/event-stream; charset=utf-8',
  'cache-control': 'no-cache',
  connection: 'keep-alive',
};

/** The faults that cut an answer (the engine's `stallAfterTokens`; `errorAfterTokens` with its status); null: off. */
export interface AnswerFaults {
  readonly stallAfter: number | null;
  readonly failAfter: StreamFailure | null;
}

/** One generated piece: text, or a piece of the tool call's arguments (JSON text). */
export interface Piece {
  readonly text: string;
  readonly args: string | undefined;
}

export abstract class AgentWriter implements AnswerWriter {
  protected readonly res: ServerResponse;
  protected readonly p: GenerateRequest;
  protected readonly meta: ResponseMeta;
  protected readonly promptTokens: number;
  readonly #maxTokens: number;
  protected readonly choice: ChoiceOutput;
  /** Prompt tokens the engine's cache served (known once the first token comes). */
  protected cached = 0;
  protected generated = 0;
  /** Fault: tokens from this index on are not written, nor the end (null: off). */
  readonly #stallAfter: number | null;
  /** Fault: a stream's error event in place of this token and the end (null: off). */
  readonly #failAfter: StreamFailure | null;
  #failed = false;

  constructor(
    res: ServerResponse,
    p: GenerateRequest,
    meta: ResponseMeta,
    promptTokens: number,
    maxTokens: number,
    faults: AnswerFaults,
  ) {
    this.res = res;
    this.p = p;
    this.meta = meta;
    this.promptTokens = promptTokens;
    this.#maxTokens = maxTokens;
    this.#stallAfter = faults.stallAfter;
    this.#failAfter = p.stream ? faults.failAfter : null;
    this.choice = new ChoiceOutput({ kind: 'chat', logprobs: undefined, toolName: p.toolName }, meta.id, [], () => '');
  }

  open(): void {
    if (this.p.stream) this.res.writeHead(200, SSE_HEADERS);
  }

  token(tokenId: number, piece: string, index: number, cached: number): void {
    if (this.#stallAfter !== null && index >= this.#stallAfter) return;
    if (this.#failAfter !== null && index >= this.#failAfter.tokens) {
      if (this.#failed) return;
      this.#failed = true;
      this.streamError(this.#failAfter.status, 'generation failed mid-stream (an injected fault)');
      if (!this.res.destroyed) this.res.end();
      return;
    }
    this.cached = cached;
    this.generated = index + 1;
    const out = this.choice.token(tokenId, piece, index === this.#maxTokens - 1);
    if (!this.p.stream) return;
    const call = (out.delta['tool_calls'] as { function: { arguments: string } }[] | undefined)?.[0];
    this.piece(index, { text: out.text, args: call?.function.arguments });
  }

  finish(u: Usage): void {
    // A stalled answer never ends (the connection stays open until the client gives up); a failed one has ended.
    if (this.#stallAfter !== null || this.#failed) return;
    this.cached = u.prompt_tokens_details.cached_tokens;
    this.generated = u.completion_tokens;
    if (this.p.stream) {
      this.streamEnd();
      if (!this.res.destroyed) this.res.end();
      return;
    }
    sendJson(this.res, 200, this.whole());
  }

  /** The whole answer's text, or its tool call (name, id, arguments as an object). */
  protected answer(): { text: string; call: { id: string; name: string; input: unknown } | undefined } {
    const whole = this.choice.whole();
    const calls = whole.message['tool_calls'] as
      { id: string; function: { name: string; arguments: string } }[] | undefined;
    const c = calls?.[0];
    return {
      text: whole.text,
      call: c === undefined ? undefined : { id: c.id, name: c.function.name, input: JSON.parse(c.function.arguments) },
    };
  }

  /** One SSE event of the API's stream: `event: <type>` and its data. */
  protected event(type: string, data: Record<string, unknown>): void {
    if (!this.res.destroyed) this.res.write(`event: ${type}\ndata: ${JSON.stringify(data)}\n\n`);
  }

  /** Generated piece `index` of a stream. */
  protected abstract piece(index: number, piece: Piece): void;
  /** A stream's closing events. */
  protected abstract streamEnd(): void;
  /** The API's own error event, ending a stream whose generation failed (`status`: the fault's error status). */
  protected abstract streamError(status: number, message: string): void;
  /** The unstreamed answer. */
  protected abstract whole(): Record<string, unknown>;
}
