/** Worker discovery: the registry of engines per model and role, and health probing. */
export { WorkerRegistry } from './registry.js';
export type { WorkerInfo, KvEventEndpoints, WorkerDeparture } from './registry.js';
export { HealthProber } from './health.js';
export type { WorkerHealthView } from './health.js';
export { Ejections } from './ejection.js';
export { OutlierDetector } from './outlier.js';
export type { ModelCheck } from './engine-models.js';
export { readEngineCacheConfig } from './engine-config.js';
export { systemScheduler } from './loop-timeout.js';
export type { Scheduler } from './loop-timeout.js';
