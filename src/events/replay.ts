/**
 * The replay contract between a stream and its publisher's replay endpoint
 * (replay-client.ts over ZMQ, or an in-memory source in tests), and the
 * stream's record of one request.
 */
import type { SequencedPayload } from './decode.js';
import type { KvEventDecodeError } from './types.js';

/** The result of asking a publisher's replay endpoint for batches. */
export interface ReplayReply {
  /** Batches with seq >= the requested start, in publisher order. */
  readonly batches: readonly SequencedPayload[];
  /** Malformed reply messages (skipped). */
  readonly errors: readonly KvEventDecodeError[];
}

/** A publisher's replay endpoint. Must settle (resolve or reject) in bounded time, and soon after `signal` aborts. */
export interface ReplaySource {
  replay(fromSeq: bigint, signal?: AbortSignal): Promise<ReplayReply>;
}

/** A replay request of this stream. */
export interface KvReplayRequest {
  readonly epoch: number;
  readonly from: bigint;
  /** Requests sent before and including this one: live items with a smaller `gen` arrived before it. */
  readonly gen: number;
  readonly abort: AbortController;
  promise: Promise<void>;
}

/** A settled reply, applied a batch per step. */
export interface ReplyInProgress {
  readonly req: KvReplayRequest;
  readonly reply: ReplayReply | undefined;
  readonly err: unknown;
  next: number;
  applied: number;
  complete: boolean;
}

