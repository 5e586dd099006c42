/**
 * The gateway's drain (`GatewayServer.close`), once every new request is
 * answered 503 + `Connection: close`:
 *
 * 1. Keep accepting until no connection has arrived for `LISTEN_QUIET_MS`, at
 *    most until the drain deadline. Closing a listener resets every connection
 *    the kernel has queued for it (their clients have already connected), so
 *    the listener closes only once its queue is empty: right after an
 *    event-loop turn's poll phase has accepted what was queued, and only when
 *    that turn accepted nothing new. A client connecting after that is refused.
 * 2. Close idle keep-alive connections (until now a request on one got its 503),
 *    and give connections accepted just before the close a moment to send
 *    their request (`FRESH_GRACE_MS`): they get an answer, not a cut.
 * 3. Let in-flight requests finish until the deadline, then abort the rest
 *    (streams end with an error event) and close every connection.
 */
import type { Server } from 'node:http';
import { Server as NetServer } from 'node:net';
import type { Logger } from 'pino';
import { KvgateError } from '../errors/index.js';
import type { ClientConnections } from './connections.js';
import type { ConcurrencySlots } from './concurrency.js';

/** How long no connection may arrive before the listeners close. */
const LISTEN_QUIET_MS = 250;
/** How long a connection accepted before the listeners closed has to send its request. */
const FRESH_GRACE_MS = 500;

export interface DrainOptions {
  /** The listeners (public, and admin when separate) that are still listening. */
  readonly servers: readonly Server[];
  readonly conns: ClientConnections;
  readonly slots: ConcurrencySlots;
  readonly logger: Logger;
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/**
 * Resolves when no connection came for LISTEN_QUIET_MS, or at `deadline`: in the check phase right after a poll
 * phase, so that a caller that closes the listeners at once (in the same microtask run) leaves none queued.
 */
async function quiet(conns: ClientConnections, deadline: number): Promise<void> {
  for (;;) {
    const left = deadline - performance.now();
    if (left > 0) await sleep(Math.min(LISTEN_QUIET_MS, left));
    await new Promise((r) => setImmediate(r));
    const now = performance.now();
    if (now >= deadline || now - conns.lastAcceptedAt >= LISTEN_QUIET_MS) return;
  }
}

/** Runs the drain (see the module comment) with `drainTimeoutMs` for all of it. */
export async function drain(parts: DrainOptions, drainTimeoutMs: number): Promise<void> {
  const deadline = performance.now() + drainTimeoutMs;
  const left = (): number => Math.max(0, deadline - performance.now());
  await quiet(parts.conns, deadline);
  // net.Server's close, not http.Server's: the latter also drops connections that were accepted but have not sent
  // their request yet, which their clients see as a reset. It calls back once every connection has closed.
  const closed = Promise.all(
    parts.servers.map((s) => new Promise<void>((resolve) => NetServer.prototype.close.call(s, () => resolve()))),
  );
  parts.logger.info(
    { sinceLastConnectionMs: Math.round(performance.now() - parts.conns.lastAcceptedAt), inflight: parts.slots.size },
    'listeners closed; draining in-flight requests',
  );
  for (const socket of parts.conns.idleKeepAlive()) socket.end();
  await parts.conns.untilNoFresh(Math.min(FRESH_GRACE_MS, left()));
  const drainedInTime = await parts.slots.waitIdle(left());
  if (!drainedInTime) {
    parts.logger.warn(
      { inflight: parts.slots.size, drainTimeoutMs },
      'drain deadline reached; aborting in-flight requests',
    );
    parts.slots.abortAll(
      new KvgateError(
        'KVG_ERR_SHUTTING_DOWN',
        'the gateway is shutting down; the request was cut at the drain deadline',
      ),
    );
    // Aborted handlers write their final error event, then release their slot.
    await parts.slots.waitIdle(1000);
  }
  for (const s of parts.servers) {
    s.closeAllConnections();
    s.close(); // http.Server's close: stops its connection-checking timer (the listener is already closed)
  }
  await closed;
}
