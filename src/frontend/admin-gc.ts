/**
 * `POST /admin/gc`: one full garbage collection, then the process's memory, for
 * soak tests and leak hunting (`npm run soak` reads the heap after warm-up and
 * at the end through it). Served only when node was started with `--expose-gc`
 * (never by default: a full collection stalls the event loop for its length)
 * and admin endpoints are on; like every admin endpoint it needs an API key
 * when keys are configured.
 */

/** Whether this process can force a collection (`node --expose-gc`). */
export function canForceGc(): boolean {
  return typeof globalThis.gc === 'function';
}

/** Collects garbage fully, then reports memory in bytes (`process.memoryUsage()` fields). */
export function gcAndMeasure(): {
  heapUsed: number;
  heapTotal: number;
  rss: number;
  external: number;
  arrayBuffers: number;
  gcMs: number;
} {
  const t0 = performance.now();
  globalThis.gc?.();
  const gcMs = Math.round((performance.now() - t0) * 100) / 100;
  const { heapUsed, heapTotal, rss, external, arrayBuffers } = process.memoryUsage();
  return { heapUsed, heapTotal, rss, external, arrayBuffers, gcMs };
}
