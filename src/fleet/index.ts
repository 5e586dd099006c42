/**
 * The fleet: every worker of every model for as long as the gateway runs:
 * membership, the discovery sources (workers files, etcd, Kubernetes), the
 * engine checks on join, health and outlier ejection, replica sync, and each
 * model's router. `kvgate serve` builds one `Fleet`; `kvgate register` uses
 * its etcd client; `kvgate picker` builds an `InferencePoolSource`.
 */
export { Fleet, modelRouter } from './fleet.js';
export type { FleetMembers } from './membership.js';
export type { ModelServices } from './services.js';
export type { FleetStatus } from './status.js';
export { etcdClient } from './etcd-client.js';
export { InferencePoolSource } from './inference-pool-source.js';
export type { PoolEndpoint } from './inference-pool-source.js';
export { EndpointOwners } from './endpoint-owners.js';
