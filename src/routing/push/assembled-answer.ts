/**
 * The answer for a client that asked for `stream: false`, read from the
 * streamed leg (every generating leg of more than one token streams, see `legStreams`): the
 * guard watches each chunk as it arrives, and the chunks are assembled into
 * the engine's non-streaming response shape (an agent API's events into its own: engines' assemble-agent.ts).
 */
import { batchesOf } from '../../common/index.js';
import { KvgateError } from '../../errors/index.js';
import {
  DEFAULT_MAX_RESPONSE_BYTES,
  EngineStreamError,
  MessagesAssembler,
  ResponseAssembler,
  ResponsesAssembler,
  type EngineEvent,
  type StreamAssembler,
} from '../../engines/index.js';
import type { LegBody } from './types.js';

/** The assembler of a leg's answer on the engine `path`. */
function assemblerFor(path: string): StreamAssembler {
  if (path === '/v1/messages') return new MessagesAssembler();
  return path === '/v1/responses' ? new ResponsesAssembler() : new ResponseAssembler();
}

/**
 * Reads the whole stream of a leg on the engine `path` into one JSON answer with the stream's `status`.
 * `events` are the leg guard's (`guardedEvents`), which end at an engine's
 * error event with an `EngineStreamError`: a 4xx code is the client's answer
 * (as the engine would have given it unstreamed, in kvgate's error object as
 * any engine refusal), anything else fails.
 * The answer is held whole until it is sent, so it is bounded as an engine's unstreamed answer is (`maxBytes`:
 * the engine client's `maxResponseBytes`, `limits.max_response_bytes`): past it the leg ends (leaving the loop cancels the engine's
 * request and frees its booking) and the client is refused; a client that streams is not bounded (its relay holds
 * only what its socket has not taken, see the frontend's `pipeRouted`).
 * @throws EngineStreamError KVG_ERR_ENGINE_FAILED for an engine error mid-stream; the stream's own errors
 *   (KVG_ERR_ENGINE_STREAM_BROKEN, KVG_ERR_CLIENT_ABORTED, ...).
 * @throws KvgateError KVG_ERR_ANSWER_TOO_LARGE once the answer holds more than `maxBytes`.
 */
export async function assembledAnswer(
  events: AsyncIterable<EngineEvent>,
  status: number,
  path: string,
  maxBytes = DEFAULT_MAX_RESPONSE_BYTES,
): Promise<{ status: number; body: LegBody }> {
  const asm = assemblerFor(path);
  try {
    for await (const batch of batchesOf(events)) {
      for (const ev of batch) {
        if (ev.done || ev.json === undefined) continue;
        asm.push(ev.json, ev.raw.length);
        if (asm.heldBytes > maxBytes) throw tooLarge(path, maxBytes);
      }
    }
  } catch (err) {
    if (err instanceof EngineStreamError && err.refusal !== undefined) return jsonBody(err.statusCode, err.refusal);
    throw err;
  }
  return jsonBody(status, asm.result());
}

function tooLarge(path: string, maxBytes: number): KvgateError {
  return new KvgateError(
    'KVG_ERR_ANSWER_TOO_LARGE',
    `the answer to this stream: false request on ${path} grew past ${maxBytes} bytes, the most kvgate holds for an ` +
      'unstreamed answer: ask for stream: true, or for fewer tokens',
    { path, maxBytes },
  );
}

function jsonBody(status: number, json: object): { status: number; body: LegBody } {
  return { status, body: { kind: 'json', bytes: JSON.stringify(json), json } };
}
