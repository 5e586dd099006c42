/** The HTTP frontend: the OpenAI-compatible gateway server, its router port, and preprocessing. */
export { startGateway } from './gateway.js';
export type { Gateway, GatewayOptions } from './gateway.js';
export { GatewayServer } from './server.js';
export type {
  ModelRouterPort,
  RouterPortFactory,
  PreparedRequest,
  RoutedResponse,
  QueryResult,
  SseEvent,
  EndpointKind,
} from './router-port.js';
export { createPreprocessor, preprocessModelSpecs, preprocessWorkerFile } from './preprocess/preprocessor.js';
export type { Preprocessor } from './preprocess/preprocessor.js';
export type { BodyOutcome } from './preprocess/protocol.js';
