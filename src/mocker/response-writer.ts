/**
 * Writes one generation's answer as vLLM's OpenAI server does: an SSE stream
 * (a role chunk first for chat, one chunk per token, the optional usage
 * chunk, then `[DONE]`) or, unstreamed, one JSON body at the end. Writes to a
 * destroyed response are dropped: the client left and the engine request is
 * being aborted.
 */
import type { ServerResponse } from 'node:http';
import { SSE_DONE, sendJson, sseJsonFrame } from '../common/index.js';
import { ChoiceOutput } from './choice-output.js';
import {
  chatChunk,
  chatResponse,
  completionChunk,
  completionResponse,
  usage,
  usageChunk,
  type GenerateRequest,
  type ResponseMeta,
  type Usage,
} from './openai-protocol.js';

/** The mocker's stream headers (vLLM's). */
const SSE_HEADERS = {
  'content-type': 'text/event-stream; charset=utf-8',
  'cache-control': 'no-cache',
  connection: 'keep-alive',
};

/** The `errorAfterTokens` fault of one stream: after how many tokens, and the error event's `code`. */
export interface StreamFailure {
  readonly tokens: number;
  readonly status: number;
}

export class ResponseWriter {
  readonly #res: ServerResponse;
  readonly #p: GenerateRequest;
  readonly #meta: ResponseMeta;
  readonly #promptTokens: number;
  readonly #maxTokens: number;
  /** The answer's text, logprobs and tool call, token by token. */
  readonly #choice: ChoiceOutput;
  /** Fault: tokens from this index on are not written, nor the end (null: off). */
  readonly #stallAfter: number | null;
  /** Fault: a stream's error event in place of this token and the end (null: off). */
  readonly #failAfter: StreamFailure | null;
  #failed = false;
  /** `return_token_ids`: the prompt's ids, sent once (then cleared), and every generated id. */
  #promptIds: readonly number[] | undefined;
  readonly #generatedIds: number[] = [];

  /** `vocab` and `textOf`: the sampled vocabulary logprob alternatives are drawn from. */
  constructor(
    res: ServerResponse,
    p: GenerateRequest,
    meta: ResponseMeta,
    promptTokens: number,
    maxTokens: number,
    vocab: readonly number[],
    textOf: (id: number) => string,
    stallAfter: number | null = null,
    promptIds?: readonly number[],
    failAfter: StreamFailure | null = null,
  ) {
    this.#res = res;
    this.#promptIds = p.returnTokenIds ? (promptIds ?? []) : undefined;
    this.#stallAfter = stallAfter;
    this.#failAfter = p.stream ? failAfter : null;
    this.#p = p;
    this.#meta = meta;
    this.#promptTokens = promptTokens;
    this.#maxTokens = maxTokens;
    this.#choice = new ChoiceOutput(
      { kind: p.kind, logprobs: p.logprobs, toolName: p.toolName },
      meta.id,
      vocab,
      textOf,
    );
  }

  /** Once the engine took the request: a stream's headers and, for chat, the role chunk. */
  open(): void {
    const p = this.#p;
    if (!p.stream) return;
    this.#res.writeHead(200, SSE_HEADERS);
    if (p.kind === 'chat')
      this.#write(
        this.#withIds(
          chatChunk(
            this.#meta,
            { role: 'assistant', content: '' },
            null,
            p.continuousUsage ? usage(this.#promptTokens, 0, 0) : undefined,
          ),
          [],
        ),
      );
  }

  /** vLLM's `return_token_ids` fields on one chunk (or the whole answer): `ids` on the choice, the prompt's ids the first time. */
  #withIds(obj: Record<string, unknown>, ids: readonly number[]): Record<string, unknown> {
    if (!this.#p.returnTokenIds) return obj;
    const choice = (obj['choices'] as Record<string, unknown>[])[0]!;
    choice['token_ids'] = ids;
    if (this.#promptIds !== undefined) {
      if (this.#p.kind === 'chat') obj['prompt_token_ids'] = this.#promptIds;
      else choice['prompt_token_ids'] = this.#promptIds;
      this.#promptIds = undefined;
    }
    return obj;
  }

  /** Generated token `index` (0-based) `tokenId` with text `piece`, with the prompt tokens the cache served. */
  token(tokenId: number, piece: string, index: number, cached: number): void {
    if (this.#stallAfter !== null && index >= this.#stallAfter) return;
    if (this.#failAfter !== null && index >= this.#failAfter.tokens) return this.#fail(this.#failAfter.status);
    const p = this.#p;
    const last = index === this.#maxTokens - 1;
    const out = this.#choice.token(tokenId, piece, last);
    if (p.returnTokenIds) this.#generatedIds.push(tokenId);
    if (!p.stream) return;
    const finish = last ? this.#choice.finishReason : null;
    const u = p.continuousUsage ? usage(this.#promptTokens, index + 1, cached) : undefined;
    this.#write(
      this.#withIds(
        p.kind === 'chat'
          ? chatChunk(this.#meta, out.delta, finish, u, out.logprobs)
          : completionChunk(this.#meta, out.text, finish, u, out.logprobs),
        [tokenId],
      ),
    );
  }

  /** The end: a stream's usage chunk and `[DONE]`, or the whole JSON body with its `kv_transfer_params`. */
  finish(u: Usage, kvTransferParams: () => unknown): void {
    // A stalled answer never ends: the connection stays open until the client gives up.
    if (this.#stallAfter !== null || this.#failed) return;
    const p = this.#p;
    const res = this.#res;
    if (p.stream) {
      if (p.includeUsage) this.#write(usageChunk(this.#meta, p.kind, u));
      if (!res.destroyed) res.end(SSE_DONE);
      return;
    }
    const ktp = kvTransferParams();
    const whole = { ...this.#choice.whole(), finishReason: this.#choice.finishReason };
    sendJson(
      res,
      200,
      this.#withIds(
        p.kind === 'chat' ? chatResponse(this.#meta, whole, u, ktp) : completionResponse(this.#meta, whole, u, ktp),
        this.#generatedIds,
      ),
    );
  }

  /** vLLM's ending of a stream whose generation failed: an error event, then `[DONE]`; once. */
  #fail(status: number): void {
    if (this.#failed) return;
    this.#failed = true;
    const message = 'generation failed mid-stream (an injected fault; rank 0 at 10.0.0.7:29500)';
    this.#write({ error: { object: 'error', message, type: 'InternalServerError', param: null, code: status } });
    if (!this.#res.destroyed) this.#res.end(SSE_DONE);
  }

  #write(obj: unknown): void {
    if (!this.#res.destroyed) this.#res.write(sseJsonFrame(obj));
  }
}
