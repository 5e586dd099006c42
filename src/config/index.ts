/** The gateway configuration: file + flags, validated once into a frozen `GatewayConfig`. */
export { loadGatewayConfig } from './load.js';
export type { LoadOptions } from './load.js';
export { parseServeFlags, parseWorkerFlag, parseFieldPath, serveUsage } from './flags.js';
export type { ConfigOverride, ServeFlags } from './flags.js';
export { resolveGatewayConfig } from './resolve.js';
export type { ResolveResult } from './resolve.js';
export { GATEWAY_DEFAULTS, defaultPreprocessThreads } from './defaults.js';
export type { ResolveContext } from './checks.js';
export type { ConfigProblem, FieldPath } from './reader.js';
export { LOG_LEVELS } from './types.js';
export type {
  GatewayConfig, ModelConfig, WorkerConfig, TokenizerSource, ListenAddress, LimitsConfig, LogLevel,
} from './types.js';
