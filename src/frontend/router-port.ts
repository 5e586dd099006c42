/**
 * The frontend's side of the port to routing. The port's types live in
 * routing (which implements them; the frontend, which sits above routing,
 * imports them through routing's index); the routing hints are common's. The
 * factory that builds a port per model from the gateway config is the
 * frontend's own; what it is handed besides the model's config is the
 * fleet's `ModelServices`.
 */
import type { ModelConfig } from '../config/index.js';
import type { ModelServices } from '../fleet/index.js';
import type { ModelRouterPort } from '../routing/index.js';

export type {
  EndpointKind,
  PreparedRequest,
  SseEvent,
  RoutedResponse,
  QueryResult,
  ModelRouterPort,
} from '../routing/index.js';

/**
 * Builds the port of one configured model (mode, workers, knobs, block size, enforce_disagg
 * all in `model`). Called once per model at startup; a rejection stops the gateway from starting.
 */
export type RouterPortFactory = (
  model: ModelConfig,
  services: ModelServices,
) => ModelRouterPort | Promise<ModelRouterPort>;
