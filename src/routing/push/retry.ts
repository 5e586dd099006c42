/**
 * Retry before the first byte: an attempt that failed before anything reached
 * the client (its worker unreachable, the connection reset, no output in time,
 * an engine 500/502/503/504: see `isMigratable`) runs again on the next-best
 * worker, with the failed ones excluded, at most `maxRetries` times and never
 * after the client went away. After the first output, the migrating stream
 * (migration.ts) takes over and dispatches its continuations through this same
 * helper, sharing the request's set of failed workers (`exclude`). The push
 * router retries one leg this way; the prefill router retries a whole
 * disaggregated request whose prefill worker was unreachable.
 */
import type { CancelSignal } from '../../common/index.js';
import { isKvgateError } from '../../errors/index.js';
import type { KvgateMetrics } from '../../metrics/index.js';

export interface RetryPolicy {
  readonly model: string;
  /** Attempts after the first (default 2 where the router is configured). */
  readonly maxRetries: number;
  /** The client's signal: once aborted, nothing is retried. */
  readonly signal: CancelSignal;
  readonly metrics: KvgateMetrics | undefined;
  /** The request's failed workers, shared with its migrations (default: a set of this call's own). */
  readonly exclude?: Set<number> | undefined;
}

export interface RetryScope {
  /** Workers this request could not reach in earlier attempts: choose none of them. */
  readonly exclude: ReadonlySet<number>;
  /** 0 for the first attempt. */
  readonly attempt: number;
  /**
   * Called by a failing attempt before it rethrows: nothing reached `workerId`. True when the
   * budget allows another attempt (the helper then runs one instead of rethrowing); counted
   * under `reason` in the retries metric.
   */
  retryElsewhere(workerId: number, reason: string): boolean;
}

/** Runs `attempt` until it resolves, or fails without asking for (or being allowed) a retry. */
export async function retryBeforeFirstByte<T>(
  policy: RetryPolicy,
  attempt: (scope: RetryScope) => Promise<T>,
): Promise<T> {
  const exclude = policy.exclude ?? new Set<number>();
  let previous: unknown;
  for (let n = 0; ; n++) {
    let retry: { workerId: number; reason: string } | undefined;
    const scope: RetryScope = {
      exclude,
      attempt: n,
      retryElsewhere: (workerId, reason) => {
        if (n >= policy.maxRetries || policy.signal.aborted) return false;
        retry = { workerId, reason };
        return true;
      },
    };
    try {
      return await attempt(scope);
    } catch (err) {
      // No worker left to retry on: the client hears about the failure that made us try, not about the empty pool.
      if (retry === undefined) throw n > 0 && isKvgateError(err, 'KVG_ERR_NO_WORKERS') ? previous : err;
      previous = err;
      exclude.add(retry.workerId);
      policy.metrics?.retries.labels({ model: policy.model, reason: retry.reason }).inc();
    }
  }
}
