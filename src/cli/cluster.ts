/**
 * `kvgate serve --processes N`: N gateway processes on one port (node:cluster).
 * The primary forks the N workers, each of which runs the whole gateway (the
 * same command line, so the same config and flags); the primary itself serves
 * nothing. It relays replica sync between the workers when no NATS server is
 * configured (the cluster's IPC channel is then the bus), forwards SIGTERM,
 * SIGINT and SIGHUP to every worker, has every worker reload when one is sent
 * `POST /admin/reload` (cluster-reload.ts), and logs a worker's exit loudly with the
 * count of exits so far. It never restarts a worker on its own: a crash loop
 * would hide behind a healthy-looking port; the operator's supervisor decides.
 * It also gathers every worker's metrics (prom-client's AggregatorRegistry)
 * when one of them is scraped, so `/metrics` on the shared port shows them all.
 */
import cluster, { type Worker } from 'node:cluster';
import { randomBytes } from 'node:crypto';
import type { Logger } from 'pino';
import { AggregatorRegistry, type Registry } from 'prom-client';
import { relaySyncMessages } from '../replicas/index.js';
import { primaryReloads } from './cluster-reload.js';

/** The environment variables the primary hands each worker. */
const INDEX_ENV = 'KVGATE_PROCESS_INDEX';
const CLUSTER_ENV = 'KVGATE_CLUSTER_ID';

/** A worker asks the primary for the cluster's metrics; the primary answers with the text or why not. */
interface MetricsRequest {
  readonly kvgateMetrics: 'request';
  readonly id: number;
}
interface MetricsReply {
  readonly kvgateMetrics: 'reply';
  readonly id: number;
  readonly text?: string;
  readonly error?: string;
}
/** Above prom-client's own 5 s bound on gathering the workers' metrics. */
const METRICS_TIMEOUT_MS = 6_000;

const isMetricsMessage = <K extends 'request' | 'reply'>(
  m: unknown,
  kind: K,
): m is K extends 'request' ? MetricsRequest : MetricsReply =>
  typeof m === 'object' &&
  m !== null &&
  (m as { kvgateMetrics?: unknown }).kvgateMetrics === kind &&
  typeof (m as { id?: unknown }).id === 'number';

/** Who this process is in a `--processes N` cluster; undefined for a lone `kvgate serve`. */
export interface ClusterMember {
  /** 1..N, stable for the life of the cluster: the `process` label and the `x-kvgate-process` header. */
  readonly index: number;
  /** Shared by the processes of one cluster (random per start): the default router id's stem. */
  readonly clusterId: string;
}

export function clusterMember(
  env: Readonly<Record<string, string | undefined>> = process.env,
): ClusterMember | undefined {
  if (!cluster.isWorker) return undefined;
  const index = Number(env[INDEX_ENV]);
  const clusterId = env[CLUSTER_ENV];
  if (!Number.isInteger(index) || index < 1 || clusterId === undefined) return undefined;
  return { index, clusterId };
}

/** A cluster worker that has stopped serving lets go of its IPC channel (which would otherwise keep it alive). */
export function leaveCluster(): void {
  if (cluster.isWorker && process.connected) process.disconnect();
}

/** Forks `processes` gateway workers and supervises them; resolves to the exit code once every worker has exited. */
export function runClusterPrimary(processes: number, logger: Logger): Promise<number> {
  const clusterId = randomBytes(4).toString('hex');
  // Structured clone on the IPC channel: replica sync payloads cross as Uint8Array.
  cluster.setupPrimary({ serialization: 'advanced' });
  const indexOf = new Map<number, number>();
  const live = (): Iterable<Worker> => Object.values(cluster.workers ?? {}).filter((w): w is Worker => w !== undefined);
  for (let i = 1; i <= processes; i++)
    indexOf.set(cluster.fork({ [INDEX_ENV]: String(i), [CLUSTER_ENV]: clusterId }).id, i);
  logger.info(
    { processes, clusterId, pids: [...live()].map((w) => w.process.pid) },
    `kvgate serve: ${processes} gateway processes started on one port; replica sync shares their bookings and sessions`,
  );
  // Every worker's registry, gathered over IPC when any of them is scraped (series told apart by `process`).
  const aggregator = new AggregatorRegistry();
  // POST /admin/reload, whichever process accepts it, reloads every process (cluster-reload.ts).
  const reloads = primaryReloads(logger, live, indexOf);
  cluster.on('message', (worker, message) => {
    if (reloads(worker, message)) return;
    if (!isMetricsMessage(message, 'request')) return relaySyncMessages(worker, message, live);
    const answer = (r: Omit<MetricsReply, 'kvgateMetrics' | 'id'>): void => {
      if (worker.isConnected()) worker.send({ kvgateMetrics: 'reply', id: message.id, ...r });
    };
    aggregator.clusterMetrics().then(
      (text) => answer({ text }),
      (err: Error) => answer({ error: err.message }),
    );
  });
  let reported = false;
  cluster.on('listening', (worker, address) => {
    if (reported) return;
    reported = true;
    logger.info(
      { listen: `http://${address.address ?? '127.0.0.1'}:${address.port}`, process: indexOf.get(worker.id) },
      'kvgate serve: the processes listen',
    );
  });
  let stopping = false;
  let exits = 0;
  const forward = (signal: NodeJS.Signals): void => {
    if (signal !== 'SIGHUP') stopping = true;
    logger.info({ signal }, `kvgate serve: forwarding ${signal} to the gateway processes`);
    for (const w of live()) w.process.kill(signal);
  };
  process.on('SIGTERM', forward);
  process.on('SIGINT', forward);
  process.on('SIGHUP', forward);
  return new Promise((resolve) => {
    cluster.on('exit', (worker, code, signal) => {
      const left = [...live()].length;
      if (!stopping) {
        exits++;
        logger.error(
          { process: indexOf.get(worker.id), pid: worker.process.pid, code, signal, exits, serving: left },
          `kvgate serve: gateway process ${indexOf.get(worker.id)} exited (${signal ?? `code ${code}`}); it is not ` +
            `restarted: ${left} of ${processes} process(es) serve`,
        );
      }
      if (left > 0) return;
      process.off('SIGTERM', forward);
      process.off('SIGINT', forward);
      process.off('SIGHUP', forward);
      resolve(stopping ? 0 : 1);
    });
  });
}

/**
 * In a cluster worker: the `/metrics` text of every process of the cluster, which the primary gathers
 * from each worker's `registry` (prom-client's AggregatorRegistry: series with the same labels are summed,
 * and every kvgate series carries its `process` label, so each process's series stay apart). When the
 * primary cannot answer (a worker stuck past the timeout), this process's own metrics are served, and
 * the warning says so: a scrape that shows one process beats one that fails.
 */
export function clusterMetricsText(registry: Registry, logger: Logger): () => Promise<string> {
  AggregatorRegistry.setRegistries(registry);
  // Constructed for its side effect: it installs this worker's answer to the primary's metric requests.
  void new AggregatorRegistry();
  const pending = new Map<number, (r: MetricsReply) => void>();
  process.on('message', (m: unknown) => {
    if (isMetricsMessage(m, 'reply')) pending.get(m.id)?.(m);
  });
  let next = 0;
  return () =>
    new Promise<string>((resolve) => {
      const id = next++;
      const settle = (r: Omit<MetricsReply, 'kvgateMetrics'>): void => {
        clearTimeout(timer);
        pending.delete(id);
        if (r.text !== undefined) return resolve(r.text);
        logger.warn(
          { reason: r.error },
          `/metrics: the cluster's metrics could not be gathered (${r.error}); serving this process's own`,
        );
        resolve(registry.metrics());
      };
      const timer = setTimeout(
        () => settle({ id, error: `no answer from the primary within ${METRICS_TIMEOUT_MS} ms` }),
        METRICS_TIMEOUT_MS,
      );
      pending.set(id, settle);
      process.send?.(
        { kvgateMetrics: 'request', id } satisfies MetricsRequest,
        undefined,
        undefined,
        (err: Error | null) => {
          if (err !== null) settle({ id, error: err.message });
        },
      );
    });
}
