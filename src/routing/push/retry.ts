/**
 * Retry before the first byte: an attempt that could not reach its worker
 * (nothing was sent to any engine) runs again on the next-best worker, with
 * the unreachable ones excluded, at most `maxRetries` times and never after
 * the client went away. Once an engine has the request nothing is retried.
 * The push router retries one leg this way; the prefill router retries a
 * whole disaggregated request whose prefill worker was unreachable.
 */
import type { KvgateMetrics } from '../../metrics/index.js';

export interface RetryPolicy {
  readonly model: string;
  /** Attempts after the first (default 2 where the router is configured). */
  readonly maxRetries: number;
  /** The client's signal: once aborted, nothing is retried. */
  readonly signal: AbortSignal;
  readonly metrics: KvgateMetrics | undefined;
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
export async function retryBeforeFirstByte<T>(policy: RetryPolicy, attempt: (scope: RetryScope) => Promise<T>): Promise<T> {
  const exclude = new Set<number>();
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
      if (retry === undefined) throw err;
      exclude.add(retry.workerId);
      policy.metrics?.retries.labels({ model: policy.model, reason: retry.reason }).inc();
    }
  }
}
