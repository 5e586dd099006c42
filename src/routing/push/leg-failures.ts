/**
 * What a failed leg tells the rest of kvgate: which failures say the worker
 * itself could not be talked to (health probing is asked to look now), what
 * outlier detection is told of a dispatch that threw, the retries metric's
 * reason, and the counting and logging of an answer that broke the protocol,
 * of an engine's error event mid-stream, or of a leg cut for making no progress.
 */
import type { WorkerRole } from '../../common/index.js';
import { EngineHttpError, EngineStreamError, protocolViolationOf } from '../../engines/index.js';
import { isKvgateError, type KvgateError } from '../../errors/index.js';
import type { RouterContext } from '../context.js';
import type { LegRequest, Selection } from './types.js';

/** Told how a dispatch ended (outlier detection): why it failed, and whether nothing answered (refused, reset). */
export type DispatchOutcomeListener = (
  workerId: number,
  error: string | undefined,
  connectionFailure?: boolean,
) => void;

/** Failures that say the worker itself could not be talked to: health probing is asked to look now. */
const CONNECTION_FAILURES = new Set([
  'KVG_ERR_ENGINE_UNREACHABLE',
  'KVG_ERR_ENGINE_NOT_REGISTERED',
  'KVG_ERR_ENGINE_DISCONNECTED',
  'KVG_ERR_ENGINE_STREAM_BROKEN',
]);

/** The worker itself could not be talked to (unreachable, not registered, disconnected, stream broken). */
export function isConnectionFailure(err: unknown): err is KvgateError {
  return isKvgateError(err) && CONNECTION_FAILURES.has(err.code);
}

/** The retries metric's reason: the error code, or the engine's status for an HTTP error. */
export function retryReason(err: KvgateError): string {
  return err instanceof EngineHttpError ? `engine_${err.upstreamStatus}` : err.code;
}

/** Deadlines an engine missed while holding the request: it took it and produced nothing in time. */
const ENGINE_TIMEOUTS = new Set([
  'KVG_ERR_ENGINE_FIRST_BYTE_TIMEOUT',
  'KVG_ERR_ENGINE_STREAM_IDLE_TIMEOUT',
  'KVG_ERR_ENGINE_HEADERS_TIMEOUT',
  'KVG_ERR_ENGINE_BODY_TIMEOUT',
]);

/**
 * Tells outlier detection how a dispatch that threw, or a stream that failed, ended: a 5xx (as a status or an error
 * event), a connection failure, an answer that broke the protocol (a proxy's HTML page for a stream) or a missed
 * deadline (Envoy counts its timeouts as gateway failures too: an engine whose loop hangs still answers its probe)
 * counts against the worker; an engine's refusal (4xx) is an answer. A client that left tells nothing, nor does a
 * deadline that expired while the leg waited for one of kvgate's connections to the worker (the engine never saw it).
 */
function reportDispatchFailure(report: DispatchOutcomeListener | undefined, workerId: number, err: unknown): void {
  if (report === undefined) return;
  if (err instanceof EngineHttpError)
    report(workerId, err.upstreamStatus >= 500 ? `the engine answered ${err.upstreamStatus}` : undefined);
  else if (err instanceof EngineStreamError) report(workerId, err.refusal === undefined ? err.code : undefined);
  else if (isConnectionFailure(err)) report(workerId, err.code, true);
  else if (isKvgateError(err, 'KVG_ERR_ENGINE_BAD_RESPONSE')) report(workerId, err.code);
  else if (isKvgateError(err) && ENGINE_TIMEOUTS.has(err.code) && !waitedForConnection(err)) report(workerId, err.code);
}

/** How a dispatch or a stream ended: `err` undefined for an answer (`reportDispatchFailure` says what a failure tells). */
export function reportOutcome(report: DispatchOutcomeListener | undefined, workerId: number, err: unknown): void {
  if (err === undefined) report?.(workerId, undefined);
  else reportDispatchFailure(report, workerId, err);
}

/** A deadline that expired while the leg waited for a connection to the worker (kvgate's bound): the engine never saw it. */
function waitedForConnection(err: KvgateError): boolean {
  return err.detail?.['phase'] === 'queued';
}

/** Where a leg failed: the pool and the leg. */
export interface FailedLeg {
  readonly ctx: RouterContext;
  readonly model: string;
  readonly role: WorkerRole;
  readonly req: LegRequest;
  readonly sel: Selection;
}

/**
 * A leg that failed on an answer breaking the protocol (before or after its first byte), on an error event of the
 * engine's in its stream, or cut for making no progress: counted and logged; the error itself says whether it is
 * migratable. Other failures are not noted here.
 */
export function noteLegFailure({ ctx, model, role, req, sel }: FailedLeg, err: unknown): void {
  const violation = protocolViolationOf(err);
  if (violation !== undefined) {
    ctx.metrics?.engineProtocolErrors.labels({ model, worker_type: role, violation }).inc();
    ctx.logger.warn(
      { requestId: req.requestId, ...sel.slot, code: (err as KvgateError).code, violation, err },
      'engine answer broke the protocol',
    );
    return;
  }
  if (err instanceof EngineStreamError) {
    const kind = err.refusal === undefined ? 'failed' : 'refused';
    ctx.metrics?.engineErrorEvents.labels({ model, worker_type: role, kind }).inc();
    ctx.logger.warn(
      { requestId: req.requestId, ...sel.slot, code: err.code, upstreamCode: err.detail?.['upstreamCode'], err },
      `the engine sent an error event mid-stream (${kind})`,
    );
    return;
  }
  if (
    !isKvgateError(err, 'KVG_ERR_ENGINE_FIRST_BYTE_TIMEOUT') &&
    !isKvgateError(err, 'KVG_ERR_ENGINE_STREAM_IDLE_TIMEOUT')
  )
    return;
  const queued = waitedForConnection(err);
  const kind = queued
    ? 'connection_wait'
    : err.code === 'KVG_ERR_ENGINE_FIRST_BYTE_TIMEOUT'
      ? 'first_byte'
      : 'stream_idle';
  ctx.metrics?.engineTimeouts.labels({ model, worker_type: role, kind }).inc();
  const { timeoutMs, connections } = err.detail ?? {};
  ctx.logger.warn(
    { requestId: req.requestId, ...sel.slot, code: err.code, timeoutMs, ...(queued ? { connections } : {}) },
    queued
      ? "engine leg waited for one of kvgate's connections to the worker past its first-byte deadline; cut (migratable)"
      : 'engine leg made no progress in time; cut (migratable)',
  );
}
