/**
 * What a simulated answer carries beyond plain text: logprobs (completions'
 * `logprobs: k`, chat's `logprobs: true` + `top_logprobs: k`) and a tool call
 * (chat with `tools`, unless `tool_choice` is "none"), in vLLM's shapes, for
 * the stream (one piece per token) and for the whole answer.
 *
 * Contract: the stream's pieces, merged as a client merges them (text and
 * arguments concatenated, logprob lists concatenated), equal the whole
 * answer exactly; values are a pure function of the generated token and its
 * position, so the same request with the same seed gives the same answer in
 * both modes.
 *
 * The simulated model "calls" a tool by emitting its generated text as the
 * call's arguments, `{"input": "<text>"}`, and then finishes with
 * `tool_calls`.
 */
import { createHash } from 'node:crypto';

/** What one request asks for beyond text. */
export interface OutputExtras {
  readonly kind: 'completion' | 'chat';
  /** Alternatives per token (0..20); undefined: no logprobs. */
  readonly logprobs: number | undefined;
  /** The function the model calls; undefined: it answers with text. */
  readonly toolName: string | undefined;
}

interface TopEntry {
  token: string;
  logprob: number;
  bytes: number[];
}

interface ChatTokenLogprob extends TopEntry {
  top_logprobs: TopEntry[];
}

interface CompletionLogprobs {
  text_offset: number[];
  token_logprobs: number[];
  tokens: string[];
  top_logprobs: (Record<string, number> | null)[];
}

/** What one token adds to a stream chunk. */
export interface TokenPiece {
  /** Completion: the chunk's `text`. Chat: the chunk's `delta`. */
  readonly text: string;
  readonly delta: Record<string, unknown>;
  readonly logprobs: unknown;
}

const ARGS_OPEN = '{"input": "';
const ARGS_CLOSE = '"}';

/** A string's JSON escape without the quotes (escaping is per character, so pieces concatenate). */
function escapeJson(s: string): string {
  return JSON.stringify(s).slice(1, -1);
}

function utf8Bytes(s: string): number[] {
  return Array.from(Buffer.from(s, 'utf8'));
}

export class ChoiceOutput {
  readonly #x: OutputExtras;
  readonly #vocab: readonly number[];
  readonly #textOf: (id: number) => string;
  readonly #toolId: string | undefined;
  #text = '';
  #count = 0;
  readonly #chatLogprobs: ChatTokenLogprob[] = [];
  readonly #completionLogprobs: CompletionLogprobs = {
    text_offset: [],
    token_logprobs: [],
    tokens: [],
    top_logprobs: [],
  };

  /**
   * @param responseId the answer's id: the tool call's id derives from it (same request id, same call id)
   * @param vocab token ids the alternatives are drawn from (the sampled vocabulary), in a fixed order
   */
  constructor(x: OutputExtras, responseId: string, vocab: readonly number[], textOf: (id: number) => string) {
    this.#x = x;
    this.#vocab = vocab;
    this.#textOf = textOf;
    this.#toolId =
      x.toolName === undefined
        ? undefined
        : `chatcmpl-tool-${createHash('sha256').update(responseId).digest('hex').slice(0, 16)}`;
  }

  /** The finish reason of a generation that ran to its length. */
  /** The tool call's id (undefined: the answer is text). */
  get toolCallId(): string | undefined {
    return this.#toolId;
  }

  get finishReason(): string {
    return this.#toolId === undefined ? 'length' : 'tool_calls';
  }

  /** Generated token `tokenId` with text `piece`; `last` for the final one. */
  token(tokenId: number, piece: string, last: boolean): TokenPiece {
    const index = this.#count++;
    const offset = this.#text.length;
    this.#text += piece;
    const logprobs = this.#logprobs(tokenId, index, piece, offset);
    if (this.#toolId === undefined) return { text: piece, delta: { content: piece }, logprobs };
    const args = `${index === 0 ? ARGS_OPEN : ''}${escapeJson(piece)}${last ? ARGS_CLOSE : ''}`;
    const call: Record<string, unknown> =
      index === 0
        ? { index: 0, id: this.#toolId, type: 'function', function: { name: this.#x.toolName, arguments: args } }
        : { index: 0, function: { arguments: args } };
    return { text: piece, delta: { tool_calls: [call] }, logprobs };
  }

  /** The whole answer's text (completion) or message (chat), and its logprobs. */
  whole(): { text: string; message: Record<string, unknown>; logprobs: unknown } {
    const message: Record<string, unknown> = {
      role: 'assistant',
      content: this.#text,
      refusal: null,
      annotations: null,
      audio: null,
      function_call: null,
      tool_calls: [],
      reasoning_content: null,
    };
    if (this.#toolId !== undefined) {
      message['content'] = null;
      message['tool_calls'] = [
        {
          id: this.#toolId,
          type: 'function',
          function: { name: this.#x.toolName, arguments: `${ARGS_OPEN}${escapeJson(this.#text)}${ARGS_CLOSE}` },
        },
      ];
    }
    let logprobs: unknown = null;
    if (this.#x.logprobs !== undefined)
      logprobs = this.#x.kind === 'chat' ? { content: this.#chatLogprobs } : this.#completionLogprobs;
    return { text: this.#text, message, logprobs };
  }

  /** This token's logprobs in the stream's shape (and kept for the whole answer); null without logprobs. */
  #logprobs(tokenId: number, index: number, piece: string, offset: number): unknown {
    const k = this.#x.logprobs;
    if (k === undefined) return null;
    const h = (Math.imul(tokenId, 2654435761) ^ Math.imul(index + 1, 40503)) >>> 0;
    const logprob = -((h % 4000) + 1) / 1000;
    const top: TopEntry[] = [];
    for (let j = 0; j < k; j++) {
      const text = j === 0 ? piece : this.#textOf(this.#vocab[(h + j) % this.#vocab.length]!);
      top.push({ token: text, logprob: logprob - j * 0.5, bytes: utf8Bytes(text) });
    }
    if (this.#x.kind === 'chat') {
      const entry: ChatTokenLogprob = { token: piece, logprob, bytes: utf8Bytes(piece), top_logprobs: top };
      this.#chatLogprobs.push(entry);
      return { content: [entry] };
    }
    const dict = k === 0 ? null : Object.fromEntries(top.map((t) => [t.token, t.logprob]));
    const c = this.#completionLogprobs;
    c.text_offset.push(offset);
    c.token_logprobs.push(logprob);
    c.tokens.push(piece);
    c.top_logprobs.push(dict);
    return { text_offset: [offset], token_logprobs: [logprob], tokens: [piece], top_logprobs: [dict] };
  }
}
