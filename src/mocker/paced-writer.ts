/**
 * A streamed answer written at its client's pace, as vLLM's is: its API server awaits each send of a
 * streaming response (starlette), and the send waits while the socket's buffer is full (uvicorn's flow
 * control). The engine does not wait: its core never learns that a client is slow, so the request keeps its
 * slot in the batch and decodes to its end, and its output waits for the writer (vLLM V1's per-request
 * output collector). Here likewise: tokens the engine produced while the response's buffer was full wait
 * here, compact (ids, not events), and become events once the socket drains (`whenWritable`), in order,
 * then the end.
 *
 * Contract: each call reaches the wrapped writer in the order it came; a call reaches it at once when
 * nothing waits and the response can take data, so a stream read at speed is written as before. The
 * response's unsent bytes stay about its high-water mark plus one token's events. A response that closes
 * (the client left, the engine crashed) drops what waits. One stated difference from vLLM: its collector
 * merges the waiting tokens into one chunk; here each keeps its own event, so a stream's events do not
 * depend on its reader's pace.
 */
import type { ServerResponse } from 'node:http';
import { whenWritable } from '../common/index.js';
import type { AnswerWriter } from './agent-writer.js';
import type { Usage } from './openai-protocol.js';

export class PacedWriter implements AnswerWriter {
  readonly #res: ServerResponse;
  readonly #inner: AnswerWriter;
  /** Waiting tokens, three numbers each (id, index, cached prompt tokens), oldest first from `#head`. */
  readonly #tokens: number[] = [];
  /** Each waiting token's text (a string of the engine's vocabulary, shared, not copied). */
  readonly #pieces: string[] = [];
  #head = 0;
  /** The end, once the engine finished while tokens still wait. */
  #end: (() => void) | undefined;
  #pumping = false;

  constructor(res: ServerResponse, inner: AnswerWriter) {
    this.#res = res;
    this.#inner = inner;
  }

  open(): void {
    this.#inner.open();
  }

  token(tokenId: number, piece: string, index: number, cached: number): void {
    if (this.#res.destroyed) return;
    if (!this.#pumping && !this.#res.writableNeedDrain) return this.#inner.token(tokenId, piece, index, cached);
    this.#tokens.push(tokenId, index, cached);
    this.#pieces.push(piece);
    this.#pump();
  }

  finish(u: Usage, kvTransferParams: () => unknown): void {
    if (!this.#pumping && !this.#res.writableNeedDrain) return this.#inner.finish(u, kvTransferParams);
    // Only a stream waits, and a stream's end does not read the transfer params (an unstreamed answer's field).
    this.#end = () => this.#inner.finish(u, kvTransferParams);
    this.#pump();
  }

  /** Writes what waits whenever the response can take it, until nothing waits or the response closed. */
  #pump(): void {
    if (this.#pumping) return;
    this.#pumping = true;
    void this.#drain();
  }

  async #drain(): Promise<void> {
    // No stall bound, as vLLM's (uvicorn's send waits without a timeout): a client that stops reading is its gateway's to cut.
    while ((await whenWritable(this.#res)) === 'ready') {
      while (this.#head < this.#pieces.length && !this.#res.writableNeedDrain) {
        const t = this.#head * 3;
        this.#inner.token(this.#tokens[t]!, this.#pieces[this.#head++]!, this.#tokens[t + 1]!, this.#tokens[t + 2]!);
      }
      if (this.#head < this.#pieces.length || this.#res.writableNeedDrain) continue;
      const end = this.#end;
      this.#clear();
      this.#pumping = false;
      end?.();
      return;
    }
    // Closed: the client left or the engine crashed; nobody will read what waits.
    this.#clear();
    this.#pumping = false;
  }

  #clear(): void {
    this.#tokens.length = 0;
    this.#pieces.length = 0;
    this.#head = 0;
    this.#end = undefined;
  }
}
