/**
 * vLLM's disaggregated prefill/decode handoff over the OpenAI API
 * (NixlConnector, sequential), as vLLM's proxy and engines speak it.
 *
 *   client body ──> prefill leg (max_tokens 1, stream false,
 *                   kv_transfer_params {do_remote_decode: true, ...}) ──> P
 *   P's JSON response ── kv_transfer_params (opaque ticket) ──┐
 *   client body ──> decode leg (kv_transfer_params verbatim) ─┴─> D ──> client
 *
 * Both legs carry the same `x-request-id`. The ticket is never interpreted:
 * its field set changes between vLLM releases. Pinned by test/engines/dialects.test.ts.
 */
import { KvgateError } from '../errors/index.js';
import { oneTokenPrefillFields, type LegFields } from './leg-fields.js';

/** The exact `kv_transfer_params` vLLM's reference proxy sends with a prefill. */
export const VLLM_PREFILL_KV_TRANSFER_PARAMS: Readonly<Record<string, unknown>> = Object.freeze({
  do_remote_decode: true,
  do_remote_prefill: false,
  remote_engine_id: null,
  remote_block_ids: null,
  remote_host: null,
  remote_port: null,
});

const REQUEST_ID_HEADER = 'x-request-id';

function checkRequestId(requestId: string): void {
  if (typeof requestId !== 'string' || requestId.length === 0) {
    throw new KvgateError('KVG_ERR_INVALID_ARGUMENT', 'requestId must be a non-empty string', { requestId });
  }
}

/**
 * The prefill leg: one token, no streaming, and a request for a remote decode.
 * @throws KvgateError KVG_ERR_INVALID_ARGUMENT for an empty request id.
 */
export function vllmPrefillLegFields(
  body: Readonly<Record<string, unknown>>,
  options: { requestId: string },
): LegFields {
  checkRequestId(options.requestId);
  return {
    fields: { ...oneTokenPrefillFields(body), kv_transfer_params: { ...VLLM_PREFILL_KV_TRANSFER_PARAMS } },
    headers: { [REQUEST_ID_HEADER]: options.requestId },
  };
}

/**
 * The decode leg: the client's body unchanged (streaming allowed) plus the prefill's ticket, verbatim.
 * @throws KvgateError KVG_ERR_INVALID_ARGUMENT for an empty request id.
 */
export function vllmDecodeLegFields(options: {
  requestId: string;
  kvTransferParams: Readonly<Record<string, unknown>>;
}): LegFields {
  checkRequestId(options.requestId);
  return {
    fields: { kv_transfer_params: options.kvTransferParams },
    headers: { [REQUEST_ID_HEADER]: options.requestId },
  };
}

export interface VllmPrefillResult {
  /** The opaque ticket for the decode leg, exactly as the prefill engine returned it. */
  kvTransferParams: Record<string, unknown>;
  /** `usage.prompt_tokens_details` (e.g. `cached_tokens`) when the engine reported it. */
  promptTokensDetails: Record<string, unknown> | undefined;
  /** `usage` when present. */
  usage: Record<string, unknown> | undefined;
}

function asObject(value: unknown): Record<string, unknown> | undefined {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
    ? (value as Record<string, unknown>)
    : undefined;
}

/**
 * Reads the handoff from a non-streaming prefill response (completion or chat).
 * @throws KvgateError KVG_ERR_NO_DISAGGREGATED_PARAMS when `kv_transfer_params` is missing, null or not an object
 *   (the detail carries the choice's `finish_reason`, which tells a request that ended for another reason, and
 *   `context.workerId` when given).
 */
export function readVllmPrefillResult(
  json: unknown,
  context: { worker?: string; workerId?: number } = {},
): VllmPrefillResult {
  const body = asObject(json);
  const params = asObject(body?.['kv_transfer_params']);
  if (params === undefined) {
    const choices = body?.['choices'];
    const first = Array.isArray(choices) ? asObject(choices[0]) : undefined;
    throw new KvgateError(
      'KVG_ERR_NO_DISAGGREGATED_PARAMS',
      `prefill response${context.worker === undefined ? '' : ` from ${context.worker}`} has no kv_transfer_params`,
      {
        worker: context.worker,
        // The id names the worker in the client's answer (which never carries the engine's URL).
        ...(context.workerId !== undefined ? { workerId: context.workerId } : {}),
        finishReason: first?.['finish_reason'],
        present: body !== undefined && 'kv_transfer_params' in body,
      },
    );
  }
  const usage = asObject(body?.['usage']);
  return { kvTransferParams: params, promptTokensDetails: asObject(usage?.['prompt_tokens_details']), usage };
}
