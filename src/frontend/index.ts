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
export { settleInlineSystem, servedModelConfig, type ServedModelConfig } from './inline-system-modes.js';
export type { Preprocessor } from './preprocess/preprocessor.js';
export type { BodyOutcome } from './preprocess/protocol.js';
// What a client may see of a failure, for the picker's answers (kvgate serve's public view).
export { asKvgateError } from './http-io.js';
export { PublicErrors } from './public-error.js';
export { errorOf } from './preprocess/task-handler.js';
