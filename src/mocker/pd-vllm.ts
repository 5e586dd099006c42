/**
 * vLLM-style prefill/decode handoff (NixlConnector),
 * simulated:
 *
 *   proxy -> P  {kv_transfer_params: {do_remote_decode: true}, max_tokens: 1}
 *   P       prefills, keeps the request's blocks under a lease (kvLeaseMs)
 *   P -> proxy  kv_transfer_params {do_remote_prefill: true, remote_engine_id,
 *               remote_block_ids [[...]], remote_request_id, remote_host,
 *               remote_port, tp_size, remote_num_tokens, remote_blocks_expiry_time}
 *   proxy -> D  original body + those params verbatim
 *   D -> P  POST /internal/kv_transfer/pull on remote_host:remote_port (the
 *           simulated NIXL read: checks engine id, request id, block ids and
 *           lease, then frees P's blocks)
 *   D       waits isl x kvBytesPerToken / bandwidth / speedup, then decodes
 *
 * The side channel is P's HTTP port (real vLLM uses a separate NIXL port);
 * `remote_engine_id` is `<engine uuid>_dp<rank>`, so a restarted P (new uuid)
 * is detected as stale.
 *
 * This file owns the wire (ticket building and parsing, D's pull), the
 * engine's side of the protocol for generation (`VllmHandoff`) and P's pull
 * endpoint (`answerKvPull`).
 */
import { httpOrigin } from '../common/index.js';
import { KvgateError } from '../errors/index.js';
import type { EngineCore } from './engine.js';
import { LOCAL_PLAN, type FinishedOn, type HandoffPlan, type HandoffProtocol } from './handoff.js';
import type { GenerateRequest } from './openai-protocol.js';
import type { FilledMockerOptions } from './options.js';

export const KV_PULL_PATH = '/internal/kv_transfer/pull';

/** What D needs from P's ticket. */
export interface RemotePrefillTicket {
  engineId: string;
  requestId: string;
  host: string;
  port: number;
  blockIds: number[];
}

export interface TicketFields {
  engineId: string;
  rank: number;
  requestId: string;
  blockIds: number[];
  host: string;
  port: number;
  numTokens: number;
  expiresAtUnixSeconds: number;
}

/** P's response ticket. */
function buildKvTransferParams(t: TicketFields): Record<string, unknown> {
  return {
    do_remote_prefill: true,
    do_remote_decode: false,
    remote_engine_id: `${t.engineId}_dp${t.rank}`,
    remote_block_ids: [t.blockIds],
    remote_request_id: t.requestId,
    remote_host: t.host,
    remote_port: t.port,
    tp_size: 1,
    remote_num_tokens: t.numTokens,
    remote_blocks_expiry_time: t.expiresAtUnixSeconds,
  };
}

/** Does a request ask this engine to prefill for a remote decode? */
function wantsRemoteDecode(params: Record<string, unknown> | undefined): boolean {
  return params?.do_remote_decode === true;
}

/** Does a request carry a ticket from a remote prefill? */
function hasRemotePrefill(params: Record<string, unknown> | undefined): boolean {
  return params?.do_remote_prefill === true;
}

function missing(what: string): KvgateError {
  return new KvgateError(
    'KVG_ERR_INVALID_REQUEST',
    `this is a decode engine: kv_transfer_params from a prefill engine are required (${what}); ` +
      'send the request to a prefill engine first with kv_transfer_params {"do_remote_decode": true}',
    { param: 'kv_transfer_params' },
  );
}

/**
 * Reads the ticket a decode engine got. Accepts flat or per-group (nested) block ids.
 * @throws KvgateError KVG_ERR_INVALID_REQUEST naming what is missing.
 */
function parseRemotePrefillTicket(params: Record<string, unknown> | undefined): RemotePrefillTicket {
  if (params === undefined) throw missing('kv_transfer_params is absent');
  if (params.do_remote_prefill !== true) throw missing('do_remote_prefill is not true');
  const {
    remote_engine_id: engineId,
    remote_request_id: requestId,
    remote_host: host,
    remote_port: port,
    remote_block_ids: ids,
  } = params;
  if (typeof engineId !== 'string' || engineId === '') throw missing('remote_engine_id is missing');
  if (typeof requestId !== 'string' || requestId === '') throw missing('remote_request_id is missing');
  if (typeof host !== 'string' || host === '') throw missing('remote_host is missing');
  if (typeof port !== 'number' || !Number.isInteger(port) || port <= 0 || port > 65535)
    throw missing('remote_port is missing');
  if (!Array.isArray(ids)) throw missing('remote_block_ids is missing');
  const flat = ids.length > 0 && ids.every(Array.isArray) ? (ids as unknown[][]).flat() : ids;
  if (!flat.every((b) => typeof b === 'number' && Number.isInteger(b) && b >= 0))
    throw missing('remote_block_ids are not block ids');
  return { engineId, requestId, host, port, blockIds: flat as number[] };
}

/** Splits `<uuid>_dp<rank>`. */
function splitEngineId(id: string): { engineId: string; rank: number } | undefined {
  const m = /^(.*)_dp(\d+)$/.exec(id);
  return m === null ? undefined : { engineId: m[1]!, rank: Number(m[2]) };
}

function transferFailed(reason: string, t: RemotePrefillTicket): KvgateError {
  return new KvgateError('KVG_ERR_KV_TRANSFER_FAILED', `KV transfer from ${t.host}:${t.port} failed: ${reason}`, {
    remoteEngineId: t.engineId,
    remoteRequestId: t.requestId,
  });
}

/**
 * D's read of P's blocks. Resolves with the number of prompt tokens P computed.
 * @throws KvgateError KVG_ERR_KV_TRANSFER_FAILED when P is unreachable or refuses (stale ticket, lease expired, wrong blocks).
 */
async function pullRemoteBlocks(t: RemotePrefillTicket, timeoutMs: number, signal?: AbortSignal): Promise<number> {
  let res: Response;
  try {
    res = await fetch(`${httpOrigin(t.host, t.port)}${KV_PULL_PATH}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        remote_engine_id: t.engineId,
        remote_request_id: t.requestId,
        remote_block_ids: t.blockIds,
      }),
      signal:
        signal === undefined
          ? AbortSignal.timeout(timeoutMs)
          : AbortSignal.any([signal, AbortSignal.timeout(timeoutMs)]),
    });
  } catch (err) {
    throw transferFailed(`cannot reach the prefill engine (${(err as Error).message})`, t);
  }
  const body = (await res.json().catch(() => ({}))) as { num_tokens?: unknown; reason?: unknown };
  if (!res.ok || typeof body.num_tokens !== 'number') {
    throw transferFailed(typeof body.reason === 'string' ? body.reason : `HTTP ${res.status}`, t);
  }
  return body.num_tokens;
}

/** D's wait for P's KV before giving up. */
const PULL_TIMEOUT_MS = 10_000;

/** Where this engine is reachable and who it is now (a restart changes the id). */
export interface EngineAddress {
  readonly engineId: string;
  readonly host: string;
  readonly port: number;
}

/**
 * vLLM's protocol on one engine, whatever its mode: a request asking for a
 * remote decode is prefilled here and its blocks kept under a lease; a request
 * with a ticket (or any request to a decode engine) pulls its prompt's KV first.
 */
export class VllmHandoff implements HandoffProtocol {
  readonly #options: FilledMockerOptions;
  readonly #address: () => EngineAddress;

  constructor(options: FilledMockerOptions, address: () => EngineAddress) {
    this.#options = options;
    this.#address = address;
  }

  async prepare(p: GenerateRequest, promptTokens: number, signal: AbortSignal): Promise<HandoffPlan> {
    if (wantsRemoteDecode(p.kvTransferParams)) return { ...LOCAL_PLAN, holdBlocksMs: this.#options.kvLeaseMs };
    if (this.#options.mode !== 'decode' && !hasRemotePrefill(p.kvTransferParams)) return LOCAL_PLAN;
    const ticket = parseRemotePrefillTicket(p.kvTransferParams);
    const n = await pullRemoteBlocks(ticket, PULL_TIMEOUT_MS, signal);
    if (n !== promptTokens) {
      throw new KvgateError(
        'KVG_ERR_KV_TRANSFER_FAILED',
        `the prefill engine computed ${n} prompt tokens but this prompt has ${promptTokens} (stale or foreign kv_transfer_params)`,
        { param: 'kv_transfer_params' },
      );
    }
    return { ...LOCAL_PLAN, remotePrefill: true };
  }

  /** P's ticket for a request that kept its blocks, else null. */
  responseParams({ info, rank, requestId }: FinishedOn): unknown {
    if (info.heldBlockIds === undefined) return null;
    const a = this.#address();
    return buildKvTransferParams({
      engineId: a.engineId,
      rank,
      requestId,
      blockIds: info.heldBlockIds,
      host: a.host,
      port: a.port,
      numTokens: info.promptTokens,
      expiresAtUnixSeconds: Date.now() / 1000 + this.#options.kvLeaseMs / 1000,
    });
  }
}

/** A rank's core and how to wake its driver after blocks were freed. */
export interface PullTarget {
  readonly core: EngineCore;
  wake(): void;
}

/**
 * P's answer to D's pull (the simulated NIXL read): 200 {num_tokens} and the
 * blocks freed, or 409 {reason} for a stale engine id, an unknown rank or a
 * refused pull.
 */
export function answerKvPull(
  body: unknown,
  engineId: string,
  ranks: readonly PullTarget[],
  now: number,
): { status: number; body: unknown } {
  const b = (body ?? {}) as { remote_engine_id?: unknown; remote_request_id?: unknown; remote_block_ids?: unknown };
  const refuse = (reason: string): { status: number; body: unknown } => ({ status: 409, body: { reason } });
  if (typeof b.remote_engine_id !== 'string' || typeof b.remote_request_id !== 'string')
    return refuse('remote_engine_id and remote_request_id are required');
  const id = splitEngineId(b.remote_engine_id);
  if (id === undefined || id.engineId !== engineId) {
    return refuse(
      `stale kv_transfer_params: engine ${b.remote_engine_id} is not this engine (${engineId}); it may have restarted`,
    );
  }
  const rank = ranks[id.rank];
  if (rank === undefined) return refuse(`no data-parallel rank ${id.rank}`);
  const blockIds = Array.isArray(b.remote_block_ids) ? (b.remote_block_ids as number[]) : undefined;
  const result = rank.core.pullHeld(b.remote_request_id, blockIds, now);
  rank.wake();
  if (!result.ok) return refuse(result.reason);
  return { status: 200, body: { num_tokens: result.numTokens } };
}
