/** The HTTP frontend: the OpenAI-compatible gateway server, its router port, and preprocessing. */
export { startGateway, startupSummary } from './gateway.js';
export type { Gateway, GatewayOptions } from './gateway.js';
export { GatewayServer } from './server.js';
export type { GatewayServerOptions, GatewayAddresses } from './server.js';
export type {
  ModelRouterPort, RouterPortFactory, RouterPortDeps, PreparedRequest, RoutedResponse, RoutedBody, QueryResult, SseEvent, EndpointKind,
} from './router-port.js';
export { createPreprocessor, preprocessModelSpecs, preprocessWorkerFile } from './preprocess/preprocessor.js';
export type { Preprocessor } from './preprocess/preprocessor.js';
export type { PreprocessModelSpec, PreprocessResult, PreprocessTask } from './preprocess/protocol.js';
export { ModelPreprocessor } from './preprocess/model-preprocessor.js';
export { SegmentTokenizer } from './preprocess/segment-tokenizer.js';
export { parseRoutingHints, QUERY_INSTANCE_ANNOTATION } from './hints.js';
export { validateBody } from './schemas.js';
export { errorBody } from './http-io.js';
export type { ErrorBody } from './http-io.js';
