/**
 * Builds the non-streaming answers of the agent APIs from their streams' events, as `ResponseAssembler` does for
 * the OpenAI chunks: kvgate streams a non-streaming Messages or Responses request from the engine so the leg's
 * progress deadlines bound it (an unstreamed answer's first byte comes only when its generation is done) and the
 * router sees its first token when it is generated. Pure: the events' parsed data in, in order; one answer out.
 *
 * - Anthropic Messages (`MessagesAssembler`), merged as Anthropic's SDK accumulates a stream: the `message_start`
 *   message, each content block from its `content_block_start`, `text_delta` / `thinking_delta` concatenated,
 *   `signature_delta` taken, `citations_delta` appended, a tool call's `input_json_delta`s concatenated and parsed
 *   as its `input`; `message_delta`'s `delta` fields (`stop_reason`, `stop_sequence`) taken and its `usage` laid
 *   over the message's (a null value does not replace one).
 * - OpenAI Responses (`ResponsesAssembler`): the response object of the last event that carries one, which in a
 *   whole stream is its final event (`response.completed`, `response.incomplete`): the whole answer.
 */
import { KvgateError } from '../errors/index.js';

type Json = Record<string, unknown>;

function obj(v: unknown): Json | undefined {
  return typeof v === 'object' && v !== null && !Array.isArray(v) ? (v as Json) : undefined;
}

/**
 * Folds a stream's events (parsed data, `[DONE]` left out) into the non-streaming answer. `heldBytes` is about
 * what the answer so far holds (the pieces it concatenates, and the raw size, `rawBytes` as `push` was given it,
 * of what it keeps whole): what a caller bounds, the stream's own per-event framing left out.
 */
export interface StreamAssembler {
  push(event: unknown, rawBytes?: number): void;
  result(): Json;
  readonly heldBytes: number;
}

/** A content block being built, and a tool call's input JSON so far (parsed at the end). */
interface BlockAcc {
  block: Json;
  inputJson: string | undefined;
}

export class MessagesAssembler implements StreamAssembler {
  #message: Json = {};
  readonly #blocks = new Map<number, BlockAcc>();
  #held = 0;

  get heldBytes(): number {
    return this.#held;
  }

  push(event: unknown, rawBytes = 0): void {
    const e = obj(event);
    if (e === undefined) return;
    const index = typeof e['index'] === 'number' ? e['index'] : 0;
    // A text, thinking or tool-input delta adds its piece (#delta); any other event counts whole (few per answer).
    if (e['type'] !== 'content_block_delta') this.#held += rawBytes;
    switch (e['type']) {
      case 'message_start':
        this.#message = { ...obj(e['message']) };
        return;
      case 'content_block_start':
        this.#blocks.set(index, { block: { ...obj(e['content_block']) }, inputJson: undefined });
        return;
      case 'content_block_delta':
        this.#delta(index, obj(e['delta']));
        return;
      case 'message_delta':
        this.#messageDelta(obj(e['delta']), obj(e['usage']));
        return;
      default:
    }
  }

  /**
   * The message the events so far add up to.
   * @throws KvgateError KVG_ERR_ENGINE_BAD_RESPONSE when a tool call's input JSON does not parse.
   */
  result(): Json {
    const content = [...this.#blocks.entries()].sort((a, b) => a[0] - b[0]).map(([, acc]) => blockOf(acc));
    return { ...this.#message, content };
  }

  #delta(index: number, d: Json | undefined): void {
    let acc = this.#blocks.get(index);
    if (acc === undefined) this.#blocks.set(index, (acc = { block: {}, inputJson: undefined }));
    const b = acc.block;
    switch (d?.['type']) {
      case 'text_delta':
        if (typeof d['text'] === 'string') b['text'] = String(b['text'] ?? '') + this.#piece(d['text']);
        return;
      case 'thinking_delta':
        if (typeof d['thinking'] === 'string') b['thinking'] = String(b['thinking'] ?? '') + this.#piece(d['thinking']);
        return;
      case 'signature_delta':
        b['signature'] = d['signature'];
        this.#held += typeof d['signature'] === 'string' ? d['signature'].length : 0;
        return;
      case 'citations_delta':
        // In place (a copy per delta would be quadratic in the citations); the block is the assembler's own.
        (Array.isArray(b['citations']) ? (b['citations'] as unknown[]) : (b['citations'] = [])).push(d['citation']);
        this.#held += JSON.stringify(d['citation'] ?? null).length;
        return;
      case 'input_json_delta':
        if (typeof d['partial_json'] === 'string')
          acc.inputJson = (acc.inputJson ?? '') + this.#piece(d['partial_json']);
        return;
      default:
    }
  }

  /** A concatenated piece, counted. */
  #piece(text: string): string {
    this.#held += text.length;
    return text;
  }

  #messageDelta(delta: Json | undefined, usage: Json | undefined): void {
    if (delta !== undefined) Object.assign(this.#message, delta);
    if (usage === undefined) return;
    const merged: Json = { ...obj(this.#message['usage']) };
    for (const k in usage) if (usage[k] !== null && usage[k] !== undefined) merged[k] = usage[k];
    this.#message['usage'] = merged;
  }
}

/** A finished block: a tool call's input parsed from its deltas (an empty input stays the start's). */
function blockOf(acc: BlockAcc): Json {
  if (acc.inputJson === undefined || acc.inputJson === '') return acc.block;
  try {
    return { ...acc.block, input: JSON.parse(acc.inputJson) as unknown };
  } catch {
    throw new KvgateError('KVG_ERR_ENGINE_BAD_RESPONSE', "a tool call's input in the engine's stream is not JSON", {
      phase: 'body',
      dataPrefix: acc.inputJson.slice(0, 200),
    });
  }
}

export class ResponsesAssembler implements StreamAssembler {
  #response: Json = {};
  #held = 0;

  /** The raw size of the event whose response is kept (one event: the SSE parser's `maxEventBytes` bounds it). */
  get heldBytes(): number {
    return this.#held;
  }

  push(event: unknown, rawBytes = 0): void {
    const r = obj(obj(event)?.['response']);
    if (r === undefined) return;
    this.#response = r;
    this.#held = rawBytes;
  }

  /** The response of the last event that carried one. */
  result(): Json {
    return this.#response;
  }
}
