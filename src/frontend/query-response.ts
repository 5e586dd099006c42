/**
 * Response bodies of query-only requests (Dynamo's query-only mode): kvgate's own
 * `POST /v1/route` answer, and the Dynamo-compatible answer on the OpenAI
 * endpoints when a request carries the `query_instance_id:` annotation
 * (`nvext.worker_id` and `nvext.token_ids`, no choices).
 */
import type { EndpointKind, PreparedRequest, QueryResult } from './router-port.js';

/**
 * Whether a request's answer shows its prompt's token ids: `POST /v1/route`'s unless `return_token_ids: false`, and
 * the query-only answer on the OpenAI endpoints (`nvext.token_ids`) always.
 */
export function answerShowsTokenIds(
  kind: EndpointKind | 'route',
  queryOnly: boolean,
  body: Readonly<Record<string, unknown>>,
): boolean {
  return kind === 'route' ? body.return_token_ids !== false : queryOnly;
}

/** Dynamo's `WorkerIdInfo`: aggregated requests name the same worker in both slots, as Dynamo's tracker does. */
function dynamoWorkerId(q: QueryResult): Record<string, number> {
  const prefill = q.prefillWorker ?? q.worker;
  return {
    prefill_worker_id: prefill.workerId,
    prefill_dp_rank: prefill.dpRank,
    decode_worker_id: q.worker.workerId,
    decode_dp_rank: q.worker.dpRank,
  };
}

/**
 * `POST /v1/route`: the decision, the prompt's token ids and block counts; nothing was booked. `return_token_ids: false`
 * in the request leaves the ids out: an agent at 128k tokens would otherwise be sent ~700 KB of ids every turn.
 */
export function routeResponseBody(req: PreparedRequest, q: QueryResult, blockSize: number): Record<string, unknown> {
  return {
    object: 'kvgate.route',
    request_id: req.requestId,
    model: req.model,
    worker: { worker_id: q.worker.workerId, dp_rank: q.worker.dpRank },
    prefill_worker:
      q.prefillWorker !== undefined ? { worker_id: q.prefillWorker.workerId, dp_rank: q.prefillWorker.dpRank } : null,
    overlap_blocks: q.overlapBlocks,
    ...(q.prefillOverlapBlocks !== undefined ? { prefill_overlap_blocks: q.prefillOverlapBlocks } : {}),
    block_size: blockSize,
    prompt_tokens: req.promptTokens,
    prompt_blocks: req.hashes.local.length,
    approximate: req.approximate,
    worker_id: dynamoWorkerId(q),
    ...(answerShowsTokenIds('route', true, req.body) ? { token_ids: Array.from(req.tokenIds) } : {}),
  };
}

function object(req: PreparedRequest, chunk: boolean): string {
  if (req.endpoint === 'completion') return 'text_completion';
  return chunk ? 'chat.completion.chunk' : 'chat.completion';
}

function nvext(req: PreparedRequest, q: QueryResult): Record<string, unknown> {
  return { worker_id: dynamoWorkerId(q), token_ids: Array.from(req.tokenIds) };
}

export function queryCompletionBody(req: PreparedRequest, q: QueryResult, created: number): Record<string, unknown> {
  return {
    id: `kvgate-${req.requestId}`,
    object: object(req, false),
    created,
    model: req.model,
    choices: [],
    nvext: nvext(req, q),
  };
}

export function queryCompletionChunk(req: PreparedRequest, q: QueryResult, created: number): Record<string, unknown> {
  return {
    id: `kvgate-${req.requestId}`,
    object: object(req, true),
    created,
    model: req.model,
    choices: [],
    nvext: nvext(req, q),
  };
}
