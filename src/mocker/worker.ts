/**
 * MockerWorker: one simulated engine process, and its lifecycle. It owns
 *   - `dpSize` ranks (ranks.ts), each an EngineCore driven in real time with
 *     its own KV-event publisher;
 *   - one HTTP server, whose paths routes.ts dispatches (generation.ts for the
 *     OpenAI API, admin.ts for /admin, pd-vllm.ts for the P/D side channel);
 *   - the P/D protocol of its engine and mode (handoff.ts);
 *   - for an SGLang-flavoured prefill engine, the bootstrap server (pd-sglang.ts).
 *
 * Source of truth: the engine cores hold request and cache state; metrics and
 * /admin/state are views read from them. Fault settings live in the
 * FaultController and take effect on the next step or request.
 *
 * Crash closes every socket at once (in-flight HTTP connections are destroyed,
 * ZMQ sockets closed) and drops all engine state; restart brings the worker
 * back on the same ports with a new engine id, an empty cache and KV-event
 * sequences starting at 0, as a restarted vLLM would.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { randomUUID } from 'node:crypto';
import { httpOrigin, listen, systemClock } from '../common/index.js';
import { KvgateError } from '../errors/index.js';
import { loadTokenizer, type TextTokenizer } from '../tokenizer/index.js';
import type { StepResult } from './engine-types.js';
import { EngineMetrics } from './engine-metrics.js';
import { FaultController } from './faults.js';
import { Generation } from './generation.js';
import { noHandoff, type HandoffProtocol } from './handoff.js';
import type { MockerEndpointInfo, MockerHandle, MockerStats, MockerTraced } from './handle.js';
import { resolveMockerOptions, type FaultSettings, type MockerInput, type FilledMockerOptions } from './options.js';
import { answerKvPull, VllmHandoff } from './pd-vllm.js';
import { BootstrapRegistry, BootstrapServer, SglangHandoff } from './pd-sglang.js';
import { openRank, type EngineRank } from './ranks.js';
import { serveRequest, type RoutesOptions } from './routes.js';

/** Ports actually bound at first start, reused on restart. */
interface BoundPorts {
  readonly http: number;
  readonly events: number[];
  readonly replay: number[];
  readonly bootstrap: number | undefined;
}

/** How many received `traceparent` headers the admin state lists. */
const TRACEPARENTS_KEPT = 16;

class MockerWorker implements MockerHandle {
  readonly options: FilledMockerOptions;
  readonly tokenizer: TextTokenizer;
  readonly #faults: FaultController;
  readonly #metrics: EngineMetrics;
  readonly #sampleIds: Uint32Array;
  readonly #routes: RoutesOptions;
  /** The W3C trace context of the last inference requests (newest last), as vLLM would continue them. */
  readonly #traced: MockerTraced[] = [];
  #ranks: EngineRank[] = [];
  #server: Server | undefined;
  #bootstrap: { registry: BootstrapRegistry; server: BootstrapServer } | undefined;
  #engineId = '';
  #crashed = true;
  #closed = false;
  #ports: BoundPorts | undefined;
  /** Aborts outgoing P/D calls on crash. */
  #lifetime = new AbortController();

  private constructor(options: FilledMockerOptions, tokenizer: TextTokenizer) {
    this.options = options;
    this.tokenizer = tokenizer;
    this.#faults = new FaultController(options.faults, options.seed);
    this.#metrics = new EngineMetrics(options, () => this.#ranks.map((r) => r.core.stats()));
    const sample = tokenizer.sampleVocabulary();
    this.#sampleIds = sample.ids;
    const tokenText = new Map<number, string>();
    sample.ids.forEach((id, i) => tokenText.set(id, sample.texts[i]!));
    this.#faults.onChange(() => {
      for (const r of this.#ranks) r.engine.wake();
      const garbage = this.#faults.takeGarbageFlood();
      if (garbage > 0) for (const r of this.#ranks) void r.publisher?.sendGarbage(garbage);
    });
    const generation = new Generation({
      options,
      tokenizer,
      faults: this.#faults,
      metrics: this.#metrics,
      handoff: this.#handoff(),
      tokenText,
      ranks: () => this.#ranks,
      lifetime: () => this.#lifetime.signal,
    });
    const pullTargets = (): { core: EngineRank['core']; wake(): void }[] =>
      this.#ranks.map((r) => ({ core: r.core, wake: () => r.engine.wake() }));
    this.#routes = {
      worker: this,
      faults: this.#faults,
      metrics: this.#metrics,
      generation,
      isUp: () => !this.#crashed,
      noteTraceparent: (path, traceparent, tracestate) => {
        const seen = tracestate === undefined ? { path, traceparent } : { path, traceparent, tracestate };
        if (this.#traced.push(seen) > TRACEPARENTS_KEPT) this.#traced.shift();
      },
      kvPull: (body) => answerKvPull(body, this.#engineId, pullTargets(), systemClock.now()),
    };
  }

  /** @throws KvgateError KVG_ERR_INVALID_CONFIG; socket errors (EADDRINUSE) as thrown by Node. */
  static async start(input: MockerInput = {}): Promise<MockerWorker> {
    const options = resolveMockerOptions(input);
    const worker = new MockerWorker(options, loadTokenizer(options.tokenizer));
    await worker.#bringUp();
    return worker;
  }

  /** vLLM speaks kv_transfer_params in every mode; SGLang's bootstrap applies to prefill and decode engines. */
  #handoff(): HandoffProtocol {
    const o = this.options;
    if (o.engine === 'vllm')
      return new VllmHandoff(o, () => ({ engineId: this.#engineId, host: this.host, port: this.port }));
    if (o.mode !== 'aggregated') return new SglangHandoff(o, () => this.#bootstrap?.registry);
    return noHandoff;
  }

  // ------------------------------------------------------------ handle API

  get host(): string {
    const h = this.options.host;
    return h === '0.0.0.0' || h === '::' || h === '' ? '127.0.0.1' : h;
  }
  get port(): number {
    return this.#ports?.http ?? 0;
  }
  get url(): string {
    return httpOrigin(this.host, this.port);
  }
  get engineId(): string {
    return this.#engineId;
  }
  get kvEventsPorts(): readonly number[] {
    return this.#ports?.events ?? [];
  }
  get kvEventsEndpoints(): readonly string[] {
    return this.kvEventsPorts.map((p) => `tcp://${this.host}:${p}`);
  }
  get replayPorts(): readonly number[] {
    return this.#ports?.replay ?? [];
  }
  get replayEndpoints(): readonly string[] {
    return this.replayPorts.map((p) => `tcp://${this.host}:${p}`);
  }
  get bootstrapPort(): number | undefined {
    return this.#ports?.bootstrap;
  }
  get faults(): Readonly<FaultSettings> {
    return this.#faults.settings;
  }

  setFaults(partial: Partial<FaultSettings>): Readonly<FaultSettings> {
    return this.#faults.update(partial);
  }

  restartEventSequence(): void {
    for (const r of this.#ranks) r.publisher?.restartSequence();
  }

  resetPrefixCache(): boolean {
    let all = true;
    for (const r of this.#ranks) {
      all = r.core.resetPrefixCache() && all;
      r.engine.wake();
    }
    return all;
  }

  stats(): MockerStats {
    return {
      crashed: this.#crashed,
      ranks: this.#ranks.map((r) => ({
        ...r.core.stats(),
        nextEventSeq: r.publisher === undefined ? null : Number(r.publisher.nextSeq),
        eventBatchesSent: r.publisher?.counts.sent ?? 0,
        eventBatchesDropped: r.publisher?.counts.dropped ?? 0,
      })),
      bootstrapPending: this.#bootstrap?.registry.pending ?? 0,
      traceparents: this.#traced.map((t) => t.traceparent),
      traced: this.#traced.map((t) => ({ ...t })),
    };
  }

  describe(): MockerEndpointInfo {
    const o = this.options;
    return {
      url: this.url,
      host: this.host,
      port: this.port,
      model: o.model,
      engine: o.engine,
      mode: o.mode,
      dp_size: o.dpSize,
      engine_id: this.#engineId,
      kv_events: [...this.kvEventsEndpoints],
      kv_events_ports: [...this.kvEventsPorts],
      kv_events_replay: [...this.replayEndpoints],
      kv_events_replay_ports: [...this.replayPorts],
      kv_events_encoding: o.kvEventsEncoding,
      block_size: o.blockSize,
      bootstrap_port: this.bootstrapPort ?? null,
      timing_model: o.timing.label,
    };
  }

  // ------------------------------------------------------------ lifecycle

  async crash(): Promise<void> {
    if (this.#crashed) return;
    this.#crashed = true;
    this.#lifetime.abort(new KvgateError('KVG_ERR_SHUTTING_DOWN', 'the engine crashed'));
    const server = this.#server;
    this.#server = undefined;
    const closing: Promise<unknown>[] = [];
    if (server !== undefined) {
      server.closeAllConnections();
      closing.push(new Promise<void>((resolve) => server.close(() => resolve())));
    }
    if (this.#bootstrap !== undefined) {
      this.#bootstrap.registry.close(new KvgateError('KVG_ERR_SHUTTING_DOWN', 'the prefill engine crashed'));
      closing.push(this.#bootstrap.server.close());
      this.#bootstrap = undefined;
    }
    for (const r of this.#ranks) {
      closing.push(r.engine.stop());
      if (r.publisher !== undefined) closing.push(r.publisher.close());
    }
    await Promise.all(closing);
  }

  async restart(): Promise<void> {
    if (this.#closed) throw new KvgateError('KVG_ERR_SHUTTING_DOWN', 'the mocker was closed');
    await this.crash();
    await this.#bringUp();
  }

  async close(): Promise<void> {
    this.#closed = true;
    await this.crash();
  }

  /** Opens the ranks, then the HTTP server, then (SGLang prefill) the bootstrap server; undoes what it opened on failure. */
  async #bringUp(): Promise<void> {
    const o = this.options;
    const ports = this.#ports;
    this.#engineId = randomUUID();
    this.#lifetime = new AbortController();
    const ranks: EngineRank[] = [];
    try {
      for (let i = 0; i < o.dpSize; i++)
        ranks.push(await openRank(o, i, this.#sampleIds, this.#faults, ports, (rank, r) => this.#onStep(rank, r)));
      const server = createServer({ keepAlive: true });
      server.on('request', (req, res) => void serveRequest(this.#routes, req, res));
      await listen(server, ports?.http ?? o.port, o.host);
      this.#server = server;
      if (o.engine === 'sglang' && o.mode === 'prefill') {
        const registry = new BootstrapRegistry(o.bootstrapTimeoutMs);
        const bs = await BootstrapServer.listen(o.host, ports?.bootstrap ?? o.bootstrapPort, registry, () => ({
          dp_size: o.dpSize,
          engine_id: this.#engineId,
        }));
        this.#bootstrap = { registry, server: bs };
      }
    } catch (err) {
      await Promise.all(ranks.map((r) => r.publisher?.close()));
      if (this.#server !== undefined) {
        const s = this.#server;
        this.#server = undefined;
        await new Promise<void>((resolve) => s.close(() => resolve()));
      }
      throw err;
    }
    this.#ranks = ranks;
    for (const r of ranks) r.engine.start();
    this.#ports ??= {
      http: (this.#server.address() as AddressInfo).port,
      events: ranks.flatMap((r) => (r.publisher === undefined ? [] : [r.publisher.port])),
      replay: ranks.flatMap((r) => (r.publisher?.replayPort === undefined ? [] : [r.publisher.replayPort])),
      bootstrap: this.#bootstrap?.server.port,
    };
    this.#crashed = false;
  }

  #onStep(rank: EngineRank, r: StepResult): void {
    if (rank.publisher === undefined || r.kvEvents.length === 0) return;
    const out = rank.publisher.publish(r.kvEvents, Date.now() / 1000);
    if (out !== undefined) this.#metrics.countEventBatch(rank.index, out.dropped ? 'dropped' : 'sent');
  }
}

/**
 * Starts one simulated engine in this process.
 * @throws KvgateError KVG_ERR_INVALID_CONFIG for bad options; bind errors as Node reports them.
 */
export function startMocker(input: MockerInput = {}): Promise<MockerHandle> {
  return MockerWorker.start(input);
}
