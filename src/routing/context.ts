/**
 * The context routing runs in: common's `Context` (clock, rng, logger) plus
 * the metrics registry. The composition root (the CLI, a test, a library
 * caller) builds it once and every router below hands the same object down:
 * ModelRouter -> PushRouter / PrefillRouter -> the disaggregated handoffs and
 * the KV-event manager. No router restates these as options.
 */
import { makeContext, type Context } from '../common/index.js';
import type { KvgateMetrics } from '../metrics/index.js';

/** Its `logger` is the model's (bound to the model by the builder, e.g. the fleet): lines never add `model` again. */
export interface RouterContext extends Context {
  /** Where routing's Prometheus series go; undefined records nothing. */
  readonly metrics: KvgateMetrics | undefined;
}

/** The process defaults (system clock, Math.random, no logging, no metrics); fields given override them. */
export function makeRouterContext(partial: Partial<RouterContext> = {}): RouterContext {
  return { ...makeContext(partial), metrics: partial.metrics };
}
