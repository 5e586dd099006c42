/**
 * Engines checked before their KV caches are trusted. Every worker that joins
 * (the config file at start or on reload, a workers file, etcd, Kubernetes) is
 * checked off the request path:
 *
 * 1. Its engine's `/metrics` (`vllm:cache_config_info`): the GPU block count
 *    becomes the worker's `total_kv_blocks` (the busy thresholds' unit) unless
 *    the config gives one, which wins; in router_mode kv, the block size must
 *    be the model's `block_size`. An unreadable `/metrics` flags nothing (info
 *    line, counted).
 *    Its KV-cache layout too (the groups its gauge states): a group kvgate
 *    has no reuse rule for (chunked local attention, a kind it does not
 *    know) is a mismatch, never routed as if it were full attention; a
 *    hybrid layout it knows (full, sliding window, Mamba) is routed by what
 *    every group can reuse (the events teach the router each group).
 * 2. With the model's `verify_tokenizer`, once the worker is routable with KV
 *    events: the tokenizer agreement probe (routing's `probeTokenizer`). An
 *    inconclusive probe flags nothing.
 *
 * A mismatch is a warn line naming both sides, a count in
 * `kvgate_worker_engine_checks_total`, and the worker `mismatched` (FleetMembers,
 * `/admin/models`): it stays routable, its KV overlap scored 0 (the registry's
 * engine facts carry `kvMismatch` to the router).
 */
import { randomUUID } from 'node:crypto';
import type { Logger } from 'pino';
import type { ModelConfig } from '../config/index.js';
import { readEngineCacheConfig, type HealthProber, type WorkerInfo, type WorkerRegistry } from '../discovery/index.js';
import { kvGroupLabel, parseKvGroupLabel, probeTokenizer, type TokenizerProbeResult } from '../routing/index.js';
import type { FleetMembers } from './membership.js';
import type { ModelServices } from './services.js';

/** How long the tokenizer probe waits for each step: the KV-event handshake, the canary's answer, its events. */
const PROBE_TIMEOUT_MS = 10_000;

type Check = 'block_size' | 'kv_groups' | 'tokenizer';

/** Where one model's checks are logged and counted, and how it tokenizes a chat. */
interface ModelSink {
  readonly model: ModelConfig;
  readonly logger: Logger;
  readonly metrics: ModelServices['metrics'];
  readonly tokenizeChat: ModelServices['tokenizeChat'];
}

/** What a worker's checks found, for the registration they were made on. */
interface Findings {
  readonly worker: WorkerInfo;
  engineBlockSize?: number;
  totalKvBlocks?: number;
  /** The KV-cache groups the engine stated (labels), when it stated any. */
  kvGroups?: readonly string[];
  mismatch: Partial<Record<Check, string>>;
  probed: boolean;
}

export class EngineChecks {
  readonly #registry: WorkerRegistry;
  readonly #members: FleetMembers;
  readonly #prober: HealthProber;
  readonly #timeoutMs: number;
  readonly #sinks = new Map<string, ModelSink>();
  readonly #found = new Map<number, Findings>();
  /** Aborts the probes in flight when the gateway stops. */
  readonly #closing = new AbortController();

  /** `timeoutMs` bounds the /metrics read (the health probe's timeout). */
  constructor(registry: WorkerRegistry, members: FleetMembers, prober: HealthProber, timeoutMs: number) {
    this.#registry = registry;
    this.#members = members;
    this.#prober = prober;
    this.#timeoutMs = timeoutMs;
    registry.on('added', (w) => this.#routable(w.id));
    members.onJoin((w) => void this.inspect(w));
    // Findings of workers that left go with them.
    members.onChange(() => {
      for (const id of [...this.#found.keys()]) this.#current(id);
    });
  }

  /**
   * The model's checks go to its router's logger and the gateway's metrics; its workers registered so far
   * are checked now: resolves when their /metrics were read (the router is built after, so their capacity
   * and block size count from the start), and the tokenizer probe starts for the routable ones.
   */
  async watch(model: ModelConfig, deps: ModelServices): Promise<void> {
    this.#sinks.set(model.name, { model, logger: deps.logger, metrics: deps.metrics, tokenizeChat: deps.tokenizeChat });
    await Promise.all(
      this.#registry
        .all()
        .filter((w) => w.model === model.name)
        .map((w) => this.inspect(w)),
    );
    for (const w of this.#registry.available(model.name)) this.#routable(w.id);
  }

  /** Stops the probes in flight (their sockets and timers would otherwise hold a stopping gateway). */
  close(): void {
    this.#closing.abort();
  }

  /** What the worker's engine said: its block size, KV-cache groups and context length (undefined: not read). */
  engineOf(id: number): {
    blockSize: number | undefined;
    kvGroups: readonly string[] | undefined;
    maxModelLen: number | undefined;
  } {
    const check = this.#prober.modelCheck(id);
    return {
      blockSize: this.#current(id)?.engineBlockSize,
      kvGroups: this.#current(id)?.kvGroups,
      maxModelLen: check?.kind === 'ok' ? check.maxModelLen : undefined,
    };
  }

  /** Reads the engine's cache configuration: capacity, and the block size against the model's. Never throws. */
  async inspect(w: WorkerInfo): Promise<void> {
    const sink = this.#sinks.get(w.model);
    if (sink === undefined) return;
    const cfg = await readEngineCacheConfig(w, this.#timeoutMs);
    if (this.#registry.get(w.id) !== w || this.#closing.signal.aborted) return;
    const f = this.#findings(w);
    const at = { workerId: w.id, url: w.url };
    if (cfg.kind === 'unreadable') {
      this.#count(sink, 'block_size', 'unreadable');
      sink.logger.info(
        { ...at, reason: cfg.reason },
        `worker ${w.id}: its engine's KV-cache configuration is not readable (${cfg.reason}); block size not checked, ` +
          `capacity as configured`,
      );
      return;
    }
    f.engineBlockSize = cfg.blockSize;
    f.totalKvBlocks = w.totalKvBlocks ?? cfg.numGpuBlocks;
    if (w.totalKvBlocks !== undefined && cfg.numGpuBlocks !== undefined && cfg.numGpuBlocks !== w.totalKvBlocks) {
      sink.logger.info(
        { ...at, configured: w.totalKvBlocks, engine: cfg.numGpuBlocks },
        `worker ${w.id}: configured total_kv_blocks ${w.totalKvBlocks} is used; its engine reports ${cfg.numGpuBlocks}`,
      );
    }
    // Only KV-aware routing names blocks: other modes take the capacity and check nothing.
    if (sink.model.routerMode !== 'kv') return this.#apply(f);
    const gatewayBlockSize = sink.model.blockSize;
    const gauge = sink.metrics.workerBlockSizeMismatch.labels({ model: w.model, worker_id: String(w.id) });
    if (cfg.blockSize !== gatewayBlockSize) {
      f.mismatch.block_size = `its engine's block size is ${cfg.blockSize}, the model's block_size is ${gatewayBlockSize}`;
      gauge.set(1);
      this.#count(sink, 'block_size', 'mismatch');
      sink.logger.warn(
        { ...at, gatewayBlockSize, engineBlockSize: cfg.blockSize },
        `worker ${w.id}: its engine's block size is ${cfg.blockSize} but the model's block_size is ${gatewayBlockSize}: ` +
          "routed without KV overlap (set the model's block_size to the engine's, or start the engine with the model's)",
      );
    } else {
      delete f.mismatch.block_size;
      gauge.set(0);
      this.#count(sink, 'block_size', 'ok');
      sink.logger.info(
        { ...at, engineBlockSize: cfg.blockSize, numGpuBlocks: cfg.numGpuBlocks ?? null },
        `worker ${w.id}: its engine's block size ${cfg.blockSize} matches the ` +
          `model's${cfg.numGpuBlocks === undefined ? '' : `; ${cfg.numGpuBlocks} GPU blocks`}`,
      );
    }
    this.#checkGroups(sink, f, cfg.kvGroups ?? []);
    this.#apply(f);
  }

  /** The engine's KV-cache layout: every group must be one kvgate has a reuse rule for. */
  #checkGroups(sink: ModelSink, f: Findings, labels: readonly string[]): void {
    const w = f.worker;
    delete f.mismatch.kv_groups;
    if (labels.length === 0) {
      delete f.kvGroups;
      return;
    }
    const specs = labels.map(parseKvGroupLabel);
    f.kvGroups = labels;
    const unknown = labels.filter((_, i) => specs[i]!.kind === 'unknown');
    const at = { workerId: w.id, url: w.url, kvGroups: labels };
    if (unknown.length === 0) {
      this.#count(sink, 'kv_groups', 'ok');
      sink.logger.info(
        at,
        `worker ${w.id}: its engine's KV-cache groups (${specs.map(kvGroupLabel).join(', ')}) are routed by the ` +
          'prefix every group can reuse',
      );
      return;
    }
    f.mismatch.kv_groups = `its engine's KV-cache layout has groups kvgate has no reuse rule for (${unknown.join(', ')})`;
    this.#count(sink, 'kv_groups', 'unknown');
    sink.logger.warn(
      { ...at, unknownGroups: unknown },
      `worker ${w.id}: its engine's KV-cache layout (${labels.join(', ')}) has groups kvgate has no reuse rule for ` +
        `(${unknown.join(', ')}): routed without KV overlap rather than as if the model were full attention`,
    );
  }

  /** A worker became routable: its tokenizer is probed once per registration when its model asks. */
  #routable(id: number): void {
    const w = this.#registry.get(id);
    const sink = w === undefined ? undefined : this.#sinks.get(w.model);
    if (
      w === undefined ||
      sink === undefined ||
      !sink.model.verifyTokenizer ||
      w.kvEvents === undefined ||
      this.#closing.signal.aborted
    )
      return;
    const f = this.#findings(w);
    if (f.probed) return;
    f.probed = true;
    void probeTokenizer({
      worker: w,
      servedModelName: w.servedModelName ?? w.model,
      tokenize: sink.tokenizeChat,
      timeoutMs: PROBE_TIMEOUT_MS,
      nonce: `${w.id}-${randomUUID().slice(0, 8)}`,
      signal: this.#closing.signal,
    }).then(
      (r) => this.#probed(f, sink, r),
      // The probe answers its failures as `inconclusive`; anything it throws still must not escape the registry's event.
      (err: unknown) =>
        this.#probed(f, sink, { outcome: 'inconclusive', reason: `the probe failed: ${(err as Error).message}` }),
    );
  }

  #probed(f: Findings, sink: ModelSink, r: TokenizerProbeResult): void {
    const w = f.worker;
    if (this.#registry.get(w.id) !== w || this.#closing.signal.aborted) return;
    this.#count(sink, 'tokenizer', r.outcome);
    const at = { workerId: w.id, url: w.url };
    if (r.outcome === 'inconclusive') {
      sink.logger.info(
        { ...at, reason: r.reason },
        `worker ${w.id}: tokenizer probe inconclusive (${r.reason}); not flagged`,
      );
      return;
    }
    if (r.outcome === 'ok') {
      sink.logger.info(
        { ...at, blocks: r.blocks, blockSize: r.blockSize },
        `worker ${w.id}: its engine tokenizes the canary chat as kvgate does (${r.blocks} blocks agree)`,
      );
      return;
    }
    f.mismatch.tokenizer = `its engine tokenizes chats differently from kvgate (block ${r.block} differs first)`;
    sink.logger.warn(
      {
        ...at,
        block: r.block,
        offset: r.offset,
        blockSize: r.blockSize,
        gatewayTokens: r.gateway,
        engineTokens: r.engine,
      },
      `worker ${w.id}: its engine tokenizes the canary chat differently from kvgate: block ${r.block} differs first, at ` +
        `token ${r.offset} ` +
        `(kvgate [${r.gateway.join(', ')}], engine [${r.engine.join(', ')}]); routed without KV overlap ` +
        "(give kvgate the engine's tokenizer and chat template)",
    );
    this.#apply(f);
  }

  #count(sink: ModelSink, check: Check, outcome: string): void {
    sink.metrics.engineChecks.labels({ model: sink.model.name, check, outcome }).inc();
  }

  /** The findings of this registration (a worker that left and joined again starts afresh). */
  #findings(w: WorkerInfo): Findings {
    let f = this.#current(w.id);
    if (f?.worker !== w) this.#found.set(w.id, (f = { worker: w, mismatch: {}, probed: false }));
    return f;
  }

  #current(id: number): Findings | undefined {
    const f = this.#found.get(id);
    if (f !== undefined && this.#registry.get(id) !== f.worker) {
      this.#found.delete(id);
      return undefined;
    }
    return f;
  }

  /** The findings reach routing (capacity, KV trust) and `/admin/models` (mismatched, with the reason). */
  #apply(f: Findings): void {
    const reasons = Object.values(f.mismatch);
    const kvMismatch = reasons.length === 0 ? undefined : reasons.join('; ');
    this.#members.setMismatch(f.worker.id, kvMismatch);
    this.#registry.setEngineFacts(f.worker.id, { totalKvBlocks: f.totalKvBlocks, kvMismatch });
  }
}
