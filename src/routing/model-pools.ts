/**
 * A model's pools, as `ModelRouter` builds them: one pool's push router and, in KV mode, its KV half (`kv-pool.ts`),
 * and what replica sync is told of a KV pool once it is built.
 */
import type { KvSlotSnapshot } from '../common/index.js';
import type { KvEventManager } from '../events/index.js';
import type { RouterContext } from './context.js';
import { kvPool } from './kv-pool.js';
import type { KvRouter } from './kv-router.js';
import type { ModelRouterOptions } from './model-router.js';
import { PushRouter } from './push/push-router.js';
import type { StickySessions } from './sticky-sessions.js';
import type { WorkerWatch } from './worker-watch.js';

/** What replica sync shares of one pool; `role`, the router side, names its channel (`<model>/decode`: routing/README). */
export interface ReplicaPool {
  readonly role: 'decode' | 'prefill';
  readonly kv: KvRouter;
  readonly sessions: StickySessions;
  /** A worker's configured role (the `worker_type` label of per-worker series). */
  readonly workerTypeOf: (workerId: number) => string;
  /** The pool's prefix index and KV-event cursors, for a peer's warm start (KV events on). */
  readonly index: (() => KvSlotSnapshot[]) | undefined;
}

/** One pool of workers: its push router and, in KV mode with events, the subscriptions feeding its index. */
export interface Pool {
  readonly push: PushRouter;
  readonly events: KvEventManager | undefined;
}

/** Replica sync is told of each KV pool once it is built: its router, sessions, worker roles and prefix index. */
export function attachReplica(
  role: 'decode' | 'prefill',
  pool: Pool,
  sessions: StickySessions,
  attach: ModelRouterOptions['attachReplica'],
): void {
  const kv = pool.push.kvRouter;
  if (kv === undefined) return;
  const index = pool.events === undefined ? undefined : (): KvSlotSnapshot[] => pool.events!.snapshot();
  attach?.({
    role,
    kv,
    sessions,
    index,
    workerTypeOf: (id) => pool.push.worker(id)?.role ?? pool.push.role,
  });
}

/**
 * Builds one pool: the decode pool at construction, the prefill pool when the
 * first prefill worker appears. The prefill KvRouter does not track active
 * blocks (as in Dynamo's prefill router, it scores on overlap and prompt load only).
 * `opts` is the router's options in force (a prefill pool built after a reload takes its knobs).
 */
export function buildPool(
  role: 'decode' | 'prefill',
  opts: ModelRouterOptions,
  ctx: RouterContext,
  watch: WorkerWatch,
): Pool {
  const { kvRouter, events } =
    opts.mode === 'kv' ? kvPool(role, opts, ctx, watch) : { kvRouter: undefined, events: undefined };
  const ev = events;
  const push = new PushRouter(
    {
      model: opts.model,
      role,
      mode: opts.mode,
      blockSize: opts.blockSize,
      kvRouter,
      engine: opts.engine,
      maxRetries: opts.maxRetries,
      legTimeouts: opts.legTimeouts,
      onWorkerUnreachable: (id) => {
        watch.unreachable(opts.registry.get(id), id);
        opts.onWorkerUnreachable?.(id);
      },
      onDispatchOutcome: opts.onDispatchOutcome,
      ...(role === 'prefill' ? {} : { migration: opts.migration }),
      onDispatch: ev === undefined ? undefined : (slot) => ev.noteDispatch(slot),
    },
    ctx,
  );
  return { push, events };
}
