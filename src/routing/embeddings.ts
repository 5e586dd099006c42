/**
 * What routing does differently for OpenAI's embeddings (`POST /v1/embeddings`, forwarded to the engine's own).
 * An embedding is a prefill whose result is pooled: it neither reads nor leaves KV blocks a later request could
 * reuse (vLLM's pooling runners run without prefix caching), so:
 *
 * - It is routed by load alone: its leg carries no block hashes, so no worker gets prefix credit and nothing is
 *   recorded as cached (predict-on-route, approximate mode). Its prompt tokens (`isl`) are booked as load until
 *   the answer arrives, as any request's prefill.
 * - It is sent as the client sent it: one JSON answer, never streamed, never migrated (retried on another worker
 *   only before the engine has it, as any request).
 * - Disaggregated serving is refused: a prefill leg hands KV blocks to a decode leg, which an embedding has not.
 */
import type { PromptHashes } from '../wasm/index.js';
import { KvgateError } from '../errors/index.js';

export const EMBEDDINGS_PATH = '/v1/embeddings';

/** A leg's hashes when it gets no prefix credit: none. */
const NO_HASHES: PromptHashes = Object.freeze({ local: new BigUint64Array(0), seq: new BigUint64Array(0) });

/** The hashes an endpoint's leg is routed with: none for embeddings (module comment), else the prompt's. */
export function routedHashes(endpoint: string, hashes: PromptHashes): PromptHashes {
  return endpoint === 'embeddings' ? NO_HASHES : hashes;
}

/** Whether a leg on `path` is a pooling request, answered as one JSON object (never streamed). */
export function isPoolingPath(path: string): boolean {
  return path === EMBEDDINGS_PATH;
}

/** KVG_ERR_EMBEDDINGS_NOT_DISAGGREGATED: the model runs disaggregated, which embeddings are not served by. */
export function embeddingsDisaggRefusal(model: string): KvgateError {
  return new KvgateError(
    'KVG_ERR_EMBEDDINGS_NOT_DISAGGREGATED',
    `model ${model} runs disaggregated (prefill and decode workers); kvgate serves ${EMBEDDINGS_PATH} only on ` +
      'models served aggregated: serve the embedding model as a model of its own, aggregated',
    { param: 'model', model },
  );
}
