/** The gateway configuration: file + flags, validated once into a frozen `GatewayConfig`. */
export { loadGatewayConfig } from './load.js';
export type { LoadOptions } from './load.js';
export { parseServeFlags, parseWorkerFlag, parseFieldPath, serveUsage } from './flags.js';
export type { ConfigOverride, ServeFlags } from './flags.js';
export { resolveGatewayConfig, GATEWAY_DEFAULTS, defaultPreprocessThreads } from './resolve.js';
export type { ResolveContext, ResolveResult } from './resolve.js';
export type { ConfigProblem, FieldPath } from './reader.js';
export { ROUTER_MODES, LOG_LEVELS } from './types.js';
export type {
  GatewayConfig, ModelConfig, WorkerConfig, TokenizerSource, RouterMode, ListenAddress, LimitsConfig, LogLevel,
} from './types.js';
