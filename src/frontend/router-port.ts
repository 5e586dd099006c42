/**
 * The frontend's side of the port to routing. The port's types live in
 * routing (which implements them; the frontend, which sits above routing,
 * imports them through routing's index); the routing hints are common's. The
 * factory that builds a port per model from the gateway config is the
 * frontend's own.
 */
import type { Logger } from 'pino';
import type { ModelConfig } from '../config/index.js';
import type { KvgateMetrics } from '../metrics/index.js';
import type { ModelRouterPort } from '../routing/index.js';

export type { EndpointKind, PreparedRequest, SseEvent, RoutedResponse, QueryResult, ModelRouterPort } from '../routing/index.js';

/** What the gateway hands a router factory besides the model's config. */
export interface RouterPortDeps {
  /** The gateway's metrics (its registry is what /metrics serves). */
  readonly metrics: KvgateMetrics;
  readonly logger: Logger;
  /**
   * The model's token ids of a chat, exactly as the gateway preprocesses a chat request (its chat
   * template and tokenizer, no special tokens added): what the tokenizer agreement probe compares.
   */
  readonly tokenizeChat: (messages: readonly { readonly role: string; readonly content: string }[]) => Promise<Uint32Array>;
}

/**
 * Builds the port of one configured model (mode, workers, knobs, block size, enforce_disagg
 * all in `model`). Called once per model at startup; a rejection stops the gateway from starting.
 */
export type RouterPortFactory = (model: ModelConfig, deps: RouterPortDeps) => ModelRouterPort | Promise<ModelRouterPort>;
