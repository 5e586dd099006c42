/**
 * Writes one generation's answer as vLLM's OpenAI server does: an SSE stream
 * (a role chunk first for chat, one chunk per token, the optional usage
 * chunk, then `[DONE]`) or, unstreamed, one JSON body at the end. Writes to a
 * destroyed response are dropped: the client left and the engine request is
 * being aborted.
 */
import type { ServerResponse } from 'node:http';
import { SSE_DONE, sendJson, sseJsonFrame } from '../common/index.js';
import {
  chatChunk, chatResponse, completionChunk, completionResponse, usage, usageChunk, type GenerateRequest, type ResponseMeta, type Usage,
} from './openai-protocol.js';

/** The mocker's stream headers (vLLM's). */
const SSE_HEADERS = { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache', connection: 'keep-alive' };

export class ResponseWriter {
  readonly #res: ServerResponse;
  readonly #p: GenerateRequest;
  readonly #meta: ResponseMeta;
  readonly #promptTokens: number;
  readonly #maxTokens: number;
  /** The unstreamed answer's text, token by token. */
  #text = '';
  /** Fault: tokens from this index on are not written, nor the end (null: off). */
  readonly #stallAfter: number | null;

  constructor(res: ServerResponse, p: GenerateRequest, meta: ResponseMeta, promptTokens: number, maxTokens: number, stallAfter: number | null = null) {
    this.#res = res;
    this.#stallAfter = stallAfter;
    this.#p = p;
    this.#meta = meta;
    this.#promptTokens = promptTokens;
    this.#maxTokens = maxTokens;
  }

  /** Once the engine took the request: a stream's headers and, for chat, the role chunk. */
  open(): void {
    const p = this.#p;
    if (!p.stream) return;
    this.#res.writeHead(200, SSE_HEADERS);
    if (p.kind === 'chat') this.#write(chatChunk(this.#meta, { role: 'assistant', content: '' }, null, p.continuousUsage ? usage(this.#promptTokens, 0, 0) : undefined));
  }

  /** Generated token `index` (0-based), with the prompt tokens the cache served. */
  token(piece: string, index: number, cached: number): void {
    if (this.#stallAfter !== null && index >= this.#stallAfter) return;
    const p = this.#p;
    if (!p.stream) {
      this.#text += piece;
      return;
    }
    const finish = index === this.#maxTokens - 1 ? 'length' : null;
    const u = p.continuousUsage ? usage(this.#promptTokens, index + 1, cached) : undefined;
    this.#write(p.kind === 'chat' ? chatChunk(this.#meta, { content: piece }, finish, u) : completionChunk(this.#meta, piece, finish, u));
  }

  /** The end: a stream's usage chunk and `[DONE]`, or the whole JSON body with its `kv_transfer_params`. */
  finish(u: Usage, kvTransferParams: () => unknown): void {
    // A stalled answer never ends: the connection stays open until the client gives up.
    if (this.#stallAfter !== null) return;
    const p = this.#p;
    const res = this.#res;
    if (p.stream) {
      if (p.includeUsage) this.#write(usageChunk(this.#meta, p.kind, u));
      if (!res.destroyed) res.end(SSE_DONE);
      return;
    }
    const ktp = kvTransferParams();
    sendJson(res, 200, p.kind === 'chat' ? chatResponse(this.#meta, this.#text, u, ktp) : completionResponse(this.#meta, this.#text, u, ktp));
  }

  #write(obj: unknown): void {
    if (!this.#res.destroyed) this.#res.write(sseJsonFrame(obj));
  }
}
