/**
 * The fleet of one gateway process: every worker of every model, and what
 * keeps them known and healthy for as long as the gateway runs. One worker
 * registry (fed by the config, the workers files, etcd and Kubernetes through
 * `FleetMembers`), one engine client, one health prober and outlier detector
 * (health.ts), the engine checks on join, replica sync, and one router per
 * model, built by the `factory` (after undici's Agent: the default builds a
 * `ModelRouter`; tests and embedders can pass their own).
 *
 * Order of start-up, and why: the static workers and the workers files are
 * registered at construction (a bad workers file stops the gateway before it
 * listens); the first probe round runs when the first router is built, after
 * the gateway's own start-up work (tokenizers), which would otherwise hold the
 * event loop past the probes' timeout (it probes every model's workers: a
 * later model's transitions until its router is built are held by the prober
 * and reported to that model's logger and metrics when it is watched); each
 * model's discovery sources start with its router, so their joins find it.
 */
import { seededRng, type KvSlotSnapshot } from '../common/index.js';
import type { GatewayConfig, ModelConfig } from '../config/index.js';
import {
  WorkerRegistry,
  type HealthProber,
  type ModelCheck,
  type OutlierDetector,
  type WorkerInfo,
} from '../discovery/index.js';
import { EngineClient } from '../engines/index.js';
import { IpcTransport, NatsTransport, ReplicaSync, channelKey, warmStartModel } from '../replicas/index.js';
import { ModelRouter, makeRouterContext } from '../routing/index.js';
import { EngineChecks } from './engine-checks.js';
import { watchEngineConnections } from './engine-gauges.js';
import { EtcdWorkersSource } from './etcd-source.js';
import { fleetHealth } from './health.js';
import { KubernetesWorkersSource } from './kubernetes-source.js';
import { FleetMembers } from './membership.js';
import type { ModelServices } from './services.js';
import type { WorkerSource } from './source.js';
import { fleetStatus, type FleetStatus } from './status.js';
import { WorkersFileSource } from './workers-file.js';

/** This process's place in a `--processes N` cluster: replica sync runs over the cluster's IPC channel. */
export interface ClusterPlace {
  readonly index: number;
  readonly clusterId: string;
}

/** What the fleet hands a router factory: the parts every model's router shares, and the model's warm-start seeds. */
export interface RouterFactoryOptions {
  readonly config: GatewayConfig;
  readonly services: ModelServices;
  readonly registry: WorkerRegistry;
  readonly engine: EngineClient;
  readonly prober: HealthProber;
  readonly outliers: OutlierDetector;
  readonly sync: ReplicaSync | undefined;
  /** Each KV pool's prefix index from a live peer, by channel (warm start); undefined when it started cold. */
  readonly seeds: Map<string, KvSlotSnapshot[]> | undefined;
}

export type RouterFactory = (model: ModelConfig, parts: RouterFactoryOptions) => ModelRouter;

export interface FleetOptions {
  /** Builds one model's router (default: `modelRouter`). */
  readonly factory?: RouterFactory;
  /** This process's place in a cluster, when it is one of several. */
  readonly cluster?: ClusterPlace | undefined;
}

/**
 * One model's router, wired to the fleet's registry, engine client, prober, detector and replica sync: the default
 * `RouterFactory` (an embedder's factory may build its routers with it).
 */
export function modelRouter(model: ModelConfig, p: RouterFactoryOptions): ModelRouter {
  const { prober, outliers, sync, seeds, config } = p;
  return new ModelRouter(
    {
      model: model.name,
      servedModelName: model.servedModelName,
      mode: model.routerMode,
      blockSize: model.blockSize,
      eagle: model.eagle,
      sessionPriority: model.sessionPriority,
      sessionAffinity: model.sessionAffinity,
      routerConfig: model.router,
      registry: p.registry,
      engine: p.engine,
      onWorkerUnreachable: (id) => prober.reportFailure(id),
      onDispatchOutcome: (id, error, connectionFailure) => outliers.record(id, error, connectionFailure),
      enforceDisagg: model.enforceDisagg,
      disaggPolicy: model.disaggPolicy,
      workerHealth: (id) => prober.view(id),
      legTimeouts: { firstByteMs: model.engineTimeouts.firstByteMs, streamIdleMs: model.engineTimeouts.streamIdleMs },
      migration: model.migration,
      sessionLimits: { maxTtlMs: config.limits.maxSessionTimeoutS * 1000, maxSessions: config.limits.maxSessions },
      kvEvents: { ...config.kvEvents, ingestThreads: config.kvIngestThreads },
      attachReplica: sync === undefined ? undefined : (pool) => sync.attach(channelKey(model.name, pool.role), pool),
      kvSeeds: seeds === undefined ? undefined : (role) => seeds.get(channelKey(model.name, role)),
    },
    makeRouterContext({ metrics: p.services.metrics, logger: p.services.logger, rng: seededRng(Date.now() >>> 0) }),
  );
}

/**
 * Replica sync over NATS when the config names servers; else, in a cluster, over the cluster's IPC channel;
 * undefined for a lone router. Each process of a cluster gets its own router id (the configured one, or the
 * cluster's, suffixed `-p<index>`).
 */
function replicaSync(config: GatewayConfig, cluster: ClusterPlace | undefined): ReplicaSync | undefined {
  const r = config.replicas;
  if (r.natsServers.length === 0 && cluster === undefined) return undefined;
  const routerId =
    cluster === undefined ? r.routerId : `${r.routerId ?? `kvgate-${cluster.clusterId}`}-p${cluster.index}`;
  const transport =
    r.natsServers.length > 0
      ? new NatsTransport(r.natsServers, routerId ?? 'kvgate', r.natsConnection)
      : new IpcTransport();
  const sync = new ReplicaSync({
    transport,
    routerId,
    heartbeatMs: r.heartbeatMs,
    peerTimeoutMs: r.peerTimeoutMs,
    maxQueuedOps: r.maxQueuedOps,
    subjectPrefix: r.subjectPrefix,
    chunkBytes: r.snapshotChunkBytes,
    maxSnapshotBytes: r.maxSnapshotBytes,
  });
  sync.start();
  return sync;
}

/** Logs and counts a worker's model-check outcome (a served-name mismatch loudly). */
function reportModelCheck(services: ModelServices, w: WorkerInfo, check: ModelCheck): void {
  const at = { workerId: w.id, url: w.url, servedModelName: w.servedModelName ?? w.model };
  services.metrics.workerServedModelMismatch
    .labels({ model: w.model, worker_id: String(w.id) })
    .set(check.kind === 'mismatch' ? 1 : 0);
  if (check.kind === 'mismatch') {
    services.logger.warn(
      { ...at, engineModels: check.served },
      `worker ${w.id}: its engine does not serve "${check.expected}" (it lists ` +
        `${check.served.map((s) => `"${s}"`).join(', ') || 'nothing'}); ` +
        "the worker is not routed to until it does (set the model's served_model_name to the engine's name)",
    );
  } else if (check.kind === 'unreadable') {
    services.logger.warn(
      { ...at, reason: check.reason },
      `worker ${w.id}: could not read its engine's /v1/models; its served model name and LoRA adapters are not checked`,
    );
  } else {
    services.logger.info(
      { ...at, loraAdapters: check.adapters },
      `worker ${w.id}: its engine serves the model${check.adapters.length > 0 ? ` and ${check.adapters.length} LoRA adapter(s)` : ''}`,
    );
  }
}

export class Fleet {
  readonly registry = new WorkerRegistry();
  readonly engine: EngineClient;
  readonly members: FleetMembers;
  /** Each worker's live status for `/admin/models`. */
  readonly status: FleetStatus;
  readonly #config: GatewayConfig;
  readonly #factory: RouterFactory;
  readonly #sync: ReplicaSync | undefined;
  readonly #prober: HealthProber;
  readonly #outliers: OutlierDetector;
  readonly #checks: EngineChecks;
  /** Each model's discovery sources (its workers file first), started with its router. */
  readonly #sources = new Map<string, WorkerSource[]>();
  readonly #routers = new Map<string, ModelRouter>();
  /** Each model's engine-connection gauges (engine-gauges.ts), written at every scrape until stopped. */
  readonly #engineGauges = new Map<string, () => void>();
  /** Each model's services, once its router is built: model-check outcomes go there. */
  readonly #services = new Map<string, ModelServices>();
  /** Model-check outcomes that came before their model's router (the first round's), by worker id. */
  readonly #early = new Map<number, [WorkerInfo, ModelCheck]>();
  #firstRound: Promise<void> | undefined;

  /**
   * Registers the config's workers and reads each model's workers file.
   * @throws KvgateError KVG_ERR_INVALID_CONFIG for a workers file that is invalid (nothing is left running).
   */
  constructor(config: GatewayConfig, opts: FleetOptions = {}) {
    this.#config = config;
    this.#factory = opts.factory ?? modelRouter;
    this.#sync = replicaSync(config, opts.cluster);
    this.engine = new EngineClient({
      connections: config.engineConnections.maxPerWorker,
      headersTimeoutMs: config.limits.requestTimeoutMs,
      bodyTimeoutMs: config.limits.requestTimeoutMs,
      maxResponseBytes: config.limits.maxResponseBytes,
    });
    // One ejection ledger: probes and dispatch errors eject under the same share of each model's workers.
    ({ prober: this.#prober, outliers: this.#outliers } = fleetHealth(config, this.registry, (w, check) =>
      this.#modelChecked(w, check),
    ));
    this.members = new FleetMembers(this.registry, this.engine, this.#prober);
    this.#checks = new EngineChecks(this.registry, this.members, this.#prober, config.health.timeoutMs);
    this.status = fleetStatus(this.members, this.registry, this.#checks);
    for (const m of config.models) for (const w of m.workers) this.#register(w, 'static');
    try {
      // Workers files are read (and validated against every id registered before) once the static workers are in.
      for (const m of config.models) this.#sources.set(m.name, this.#sourcesOf(m));
    } catch (err) {
      void this.close();
      throw err;
    }
  }

  #register(w: WorkerInfo, source: 'static' | 'file'): void {
    this.registry.add(w);
    this.engine.addWorker(w.url);
    this.members.started(w, source);
  }

  /** The model's discovery sources; its workers file's workers are registered now. */
  #sourcesOf(m: ModelConfig): WorkerSource[] {
    const out: WorkerSource[] = [];
    if (m.workersFile !== undefined) {
      const file = new WorkersFileSource(m, this.registry, this.members);
      for (const w of file.initial()) this.#register(w, 'file');
      out.push(file);
    }
    if (m.etcd !== undefined) out.push(new EtcdWorkersSource(m, this.registry, this.members, Math.random));
    if (m.kubernetes !== undefined) out.push(new KubernetesWorkersSource(m, this.registry, this.members));
    return out;
  }

  #modelChecked(w: WorkerInfo, check: ModelCheck): void {
    const services = this.#services.get(w.model);
    if (services !== undefined) reportModelCheck(services, w, check);
    else this.#early.set(w.id, [w, check]);
  }

  /**
   * Builds `model`'s router once its workers have had their first probe and engine checks, and starts the
   * model's discovery sources; its transitions, checks and discovery go to `services`' logger and metrics.
   */
  readonly createRouter = async (model: ModelConfig, services: ModelServices): Promise<ModelRouter> => {
    this.#prober.watch(model.name, services.logger, services.metrics);
    this.members.watch(model.name, services.logger, services.metrics);
    const inspected = this.#checks.watch(model, services);
    for (const source of this.#sources.get(model.name) ?? []) source.start(services.logger, services.metrics);
    this.#services.set(model.name, services);
    this.#engineGauges.get(model.name)?.();
    this.#engineGauges.set(
      model.name,
      watchEngineConnections(model.name, this.registry, this.engine, services.metrics),
    );
    if (this.#firstRound === undefined) {
      this.#firstRound = this.#prober.probeAll();
      this.#prober.start();
    }
    await Promise.all([this.#firstRound, inspected]);
    this.#sync?.bind(services.logger, services.metrics);
    for (const [id, [w, check]] of this.#early) {
      if (w.model !== model.name) continue;
      this.#early.delete(id);
      reportModelCheck(services, w, check);
    }
    const seeds = await this.#warmStart(model);
    const router = this.#factory(model, {
      config: this.#config,
      services,
      registry: this.registry,
      engine: this.engine,
      prober: this.#prober,
      outliers: this.#outliers,
      sync: this.#sync,
      seeds,
    });
    this.#routers.set(model.name, router);
    return router;
  };

  /** A new replica's warm start of a KV-routed model (replica sync on, `replicas.warm_start`); undefined when cold. */
  #warmStart(model: ModelConfig): Promise<Map<string, KvSlotSnapshot[]> | undefined> {
    const sync = this.#sync;
    if (sync === undefined || !this.#config.replicas.warmStart || model.routerMode !== 'kv')
      return Promise.resolve(undefined);
    const roles = model.workers.some((w) => w.role === 'prefill') ? ['decode', 'prefill'] : ['decode'];
    return warmStartModel(sync, model.name, roles, this.#config.replicas.warmStartTimeoutMs, model.blockSize);
  }

  /** The router knobs of one model, for the requests routed from now on (a reload). */
  reconfigureRouter(model: ModelConfig): void {
    this.#routers.get(model.name)?.reconfigure(model.router);
  }

  /** `config` as the gateway serves it: each model's workers with those its discovery sources brought. */
  served(config: GatewayConfig): GatewayConfig {
    return this.members.served(config);
  }

  /** Stops discovery, probing, checks and replica sync, then closes the engine pools (the routers are the gateway's). */
  async close(): Promise<void> {
    await Promise.all([...this.#sources.values()].flat().map((s) => s.close()));
    for (const c of [this.#prober, this.#outliers, this.#checks]) c.close();
    for (const stop of this.#engineGauges.values()) stop();
    await this.#sync?.close();
    await this.engine.close();
  }
}
