/**
 * The mocker's admin endpoints, for tests and demos (a real engine has
 * none): read and change faults, crash the process, restart the KV-event
 * sequence, read the whole state. They answer even while the engine hangs.
 *
 *   GET  /admin/faults                   {faults}
 *   POST /admin/faults                   {hang?, slow_factor?, ...} -> {faults}
 *   POST /admin/crash                    202, then every socket closes
 *   POST /admin/restart_event_sequence   {next_seq: 0}
 *   GET  /admin/state                    describe() + stats() + faults
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { readBody, sendJson } from '../common/index.js';
import { KvgateError } from '../errors/index.js';
import { MAX_BODY_BYTES } from './generation.js';
import type { MockerHandle } from './handle.js';
import type { FaultSettings } from './options.js';

/** Admin field names (snake_case, camelCase accepted) to FaultSettings keys. */
const FAULT_FIELDS: Record<string, keyof FaultSettings> = {
  hang: 'hang',
  slow_factor: 'slowFactor',
  slowFactor: 'slowFactor',
  error_rate: 'errorRate',
  errorRate: 'errorRate',
  error_status: 'errorStatus',
  errorStatus: 'errorStatus',
  drop_event_rate: 'dropEventRate',
  dropEventRate: 'dropEventRate',
  drop_next_event_batches: 'dropNextEventBatches',
  dropNextEventBatches: 'dropNextEventBatches',
  reorder_events: 'reorderEvents',
  reorderEvents: 'reorderEvents',
  stall_after_tokens: 'stallAfterTokens',
  stallAfterTokens: 'stallAfterTokens',
  error_after_tokens: 'errorAfterTokens',
  errorAfterTokens: 'errorAfterTokens',
  garbage_event_flood: 'garbageEventFlood',
  garbageEventFlood: 'garbageEventFlood',
};

function faultsToWire(f: Readonly<FaultSettings>): Record<string, unknown> {
  return {
    hang: f.hang,
    slow_factor: f.slowFactor,
    error_rate: f.errorRate,
    error_status: f.errorStatus,
    drop_event_rate: f.dropEventRate,
    drop_next_event_batches: f.dropNextEventBatches,
    reorder_events: f.reorderEvents,
    stall_after_tokens: f.stallAfterTokens,
    error_after_tokens: f.errorAfterTokens,
    garbage_event_flood: f.garbageEventFlood,
  };
}

/**
 * Serves one /admin/ request on `worker`.
 * @throws KvgateError KVG_ERR_NOT_FOUND, KVG_ERR_INVALID_JSON, KVG_ERR_INVALID_REQUEST (answered by the caller)
 */
export async function serveAdmin(
  worker: MockerHandle,
  method: string,
  path: string,
  req: IncomingMessage,
  res: ServerResponse,
): Promise<void> {
  switch (`${method} ${path}`) {
    case 'GET /admin/faults':
      return sendJson(res, 200, { faults: faultsToWire(worker.faults) });
    case 'POST /admin/faults':
      return sendJson(res, 200, { faults: faultsToWire(setFaults(worker, await readBody(req, MAX_BODY_BYTES))) });
    case 'POST /admin/crash':
      res.once('finish', () => void worker.crash());
      return sendJson(res, 202, { crashing: true }, { connection: 'close' });
    case 'POST /admin/restart_event_sequence':
      worker.restartEventSequence();
      return sendJson(res, 200, { next_seq: 0 });
    case 'GET /admin/state':
      return sendJson(res, 200, { ...worker.describe(), ...worker.stats(), faults: faultsToWire(worker.faults) });
  }
  throw new KvgateError('KVG_ERR_NOT_FOUND', `no admin route ${method} ${path}`, {});
}

/** Applies a JSON object of faults; an unknown field or a bad value changes nothing. */
function setFaults(worker: MockerHandle, raw: Buffer): Readonly<FaultSettings> {
  let body: unknown;
  try {
    body = JSON.parse(raw.toString('utf8'));
  } catch {
    throw new KvgateError('KVG_ERR_INVALID_JSON', 'the request body is not valid JSON', {});
  }
  if (typeof body !== 'object' || body === null || Array.isArray(body))
    throw new KvgateError('KVG_ERR_INVALID_REQUEST', 'expected a JSON object of faults', {});
  const partial: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(body)) {
    const key = FAULT_FIELDS[k];
    if (key === undefined) throw new KvgateError('KVG_ERR_INVALID_REQUEST', `unknown fault ${k}`, { param: k });
    partial[key] = v;
  }
  try {
    return worker.setFaults(partial as Partial<FaultSettings>);
  } catch (err) {
    throw new KvgateError('KVG_ERR_INVALID_REQUEST', (err as Error).message, {});
  }
}
