/**
 * One offline run as plain data (a policy, a topology, the workload, the
 * engine options), so it can run in this thread or in a worker thread and
 * come back as a `PolicyRun`.
 */
import { resolveMockerOptions, type MockerInput } from '../mocker/index.js';
import { runOffline, type Topology } from './offline.js';
import type { PolicySpec } from './policy.js';
import type { ReplicaOptions } from './router-replicas.js';
import type { PolicyRun } from './results.js';
import type { Workload } from './workload.js';

export interface OfflineJob {
  readonly workload: Workload;
  readonly policy: PolicySpec;
  readonly topology: Topology;
  /** Mocker options; `engineHashSeed` set so runs are reproducible. */
  readonly engine: MockerInput;
  readonly seed: number;
  readonly vocabSize?: number;
  readonly bucketMs?: number;
  readonly replicas?: ReplicaOptions;
  readonly sessionPriority?: boolean;
  readonly sessionPins?: boolean;
}

/** Runs a job in this thread. @throws KvgateError for invalid engine options or topology. */
export function runOfflineJob(job: OfflineJob, onProgress?: (done: number, total: number) => void): Promise<PolicyRun> {
  return runOffline({
    workload: job.workload,
    policy: job.policy,
    topology: job.topology,
    engine: resolveMockerOptions(job.engine),
    seed: job.seed,
    ...(job.vocabSize !== undefined ? { vocabSize: job.vocabSize } : {}),
    ...(job.bucketMs !== undefined ? { bucketMs: job.bucketMs } : {}),
    ...(job.replicas !== undefined ? { replicas: job.replicas } : {}),
    ...(job.sessionPriority === true ? { sessionPriority: true } : {}),
    ...(job.sessionPins === true ? { sessionPins: true } : {}),
    ...(onProgress !== undefined ? { onProgress } : {}),
  });
}

/** Messages from an offline worker thread. */
export type OfflineWorkerMessage =
  | { readonly type: 'progress'; readonly done: number; readonly total: number }
  | { readonly type: 'done'; readonly run: PolicyRun }
  | { readonly type: 'error'; readonly message: string; readonly code: string | undefined };
