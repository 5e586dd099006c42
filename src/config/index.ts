/** The gateway configuration: file + flags, validated once into a frozen `GatewayConfig`. */
export { loadGatewayConfig } from './load.js';
export { GATEWAY_DEFAULTS } from './defaults.js';
export { closestFlag, parseCommandArgs, parseServeFlags, parseFieldPath, serveUsage } from './flags.js';
export type { ConfigProblem } from './reader.js';
export type {
  AddressBlock,
  ClientAddressSource,
  EtcdDiscovery,
  KubernetesDiscovery,
  InferencePoolDiscovery,
  GatewayConfig,
  ModelConfig,
  WorkerConfig,
  TokenizerSource,
  TracingConfig,
  TenantClassConfig,
  TenantsConfig,
} from './types.js';
export { OTHER_TENANT } from './resolve-tenants.js';
export { configProblemsError } from './load.js';
export { configChanges, hiddenByFlags, reloadProblems, workerDiff } from './reload.js';
export { withoutCredentials } from './redact.js';
export type { ConfigChange, HiddenByFlag } from './reload.js';
export type { FlaggedField } from './load.js';
export { loadWorkersFile } from './workers-file.js';
export {
  etcdModelPrefix,
  etcdWorkerIdProblem,
  parseEtcdWorkerId,
  readEtcdWorker,
  readEtcdWorkerValue,
} from './etcd.js';
export { KV_EVENTS_PORT, kubernetesWorker, type KubernetesEndpoint } from './kubernetes.js';
