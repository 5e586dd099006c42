/**
 * MockerWorker: one simulated engine process. It owns
 *   - `dpSize` ranks, each an EngineCore driven in real time, with its own
 *     KV-event publisher (PUB port + rank, optional replay ROUTER port + rank);
 *   - one HTTP server (OpenAI API, /metrics, /health, admin, the vLLM P/D side
 *     channel);
 *   - for an SGLang-flavoured prefill engine, the bootstrap server.
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
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { randomUUID } from 'node:crypto';
import { systemClock } from '../core/clock.js';
import { KvgateError } from '../errors/index.js';
import { loadTokenizer, type TextTokenizer } from '../tokenizer/index.js';
import { xxh3 } from '../wasm/index.js';
import { EngineCore, type CoreRequest, type EngineCoreStats, type FinishedRequest, type StepResult } from './engine.js';
import { EngineMetrics } from './engine-metrics.js';
import { FaultController } from './faults.js';
import { KvEventPublisher } from './kv-publisher.js';
import type { EngineFlavour } from './kv-events.js';
import {
  chatChunk, chatResponse, completionChunk, completionResponse, errorResponse, parseGenerateRequest, usage, usageChunk,
  type GenerateRequest, type ResponseMeta,
} from './openai-protocol.js';
import { engineCoreOptions, resolveMockerOptions, type DisaggregationMode, type FaultSettings, type MockerInput, type ResolvedMockerOptions } from './options.js';
import {
  buildKvTransferParams, hasRemotePrefill, KV_PULL_PATH, parseRemotePrefillTicket, pullRemoteBlocks, splitEngineId, wantsRemoteDecode,
} from './pd-vllm.js';
import { BootstrapRegistry, BootstrapServer, rendezvousWithPrefill } from './pd-sglang.js';
import { RealtimeEngine } from './realtime-engine.js';

/** What `kvgate mocker` prints per engine (one JSON line) and `describe()` returns. */
export interface MockerEndpointInfo {
  url: string;
  host: string;
  port: number;
  model: string;
  engine: EngineFlavour;
  mode: DisaggregationMode;
  dp_size: number;
  engine_id: string;
  /** PUB endpoint per rank (empty when KV events are off). */
  kv_events: string[];
  kv_events_ports: number[];
  /** Replay ROUTER endpoint per rank (empty when replay is off). */
  kv_events_replay: string[];
  kv_events_replay_ports: number[];
  kv_events_encoding: string;
  block_size: number;
  bootstrap_port: number | null;
  timing_model: string;
}

export interface MockerStats {
  crashed: boolean;
  ranks: (EngineCoreStats & { nextEventSeq: number | null; eventBatchesSent: number; eventBatchesDropped: number })[];
  bootstrapPending: number;
}

/** An in-process mocker. Every method is safe to call after close (it does nothing or throws a clear error). */
export interface MockerHandle {
  readonly options: ResolvedMockerOptions;
  readonly url: string;
  readonly host: string;
  readonly port: number;
  readonly engineId: string;
  readonly kvEventsEndpoints: readonly string[];
  readonly kvEventsPorts: readonly number[];
  readonly replayEndpoints: readonly string[];
  readonly replayPorts: readonly number[];
  readonly bootstrapPort: number | undefined;
  readonly tokenizer: TextTokenizer;
  /** Current faults; change them with `setFaults` (or POST /admin/faults). */
  readonly faults: Readonly<FaultSettings>;
  /** @throws KvgateError KVG_ERR_INVALID_CONFIG for an unknown fault or bad value. */
  setFaults(partial: Partial<FaultSettings>): Readonly<FaultSettings>;
  /** Next KV-event batch of every rank gets seq 0 again (and replay buffers are emptied). */
  restartEventSequence(): void;
  /** vLLM's /reset_prefix_cache on every rank: AllBlocksCleared; false if any rank had blocks in use. */
  resetPrefixCache(): boolean;
  stats(): MockerStats;
  describe(): MockerEndpointInfo;
  /** Closes every socket at once, losing all state. */
  crash(): Promise<void>;
  /** Comes back after a crash (or crashes first) on the same ports, with a fresh engine. */
  restart(): Promise<void>;
  close(): Promise<void>;
}

interface Rank {
  index: number;
  core: EngineCore;
  engine: RealtimeEngine;
  publisher: KvEventPublisher | undefined;
}

const MAX_BODY_BYTES = 64 * 1024 * 1024;

class BodyTooLarge extends Error {}

async function readBody(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const c of req) {
    size += (c as Buffer).length;
    if (size > MAX_BODY_BYTES) throw new BodyTooLarge();
    chunks.push(c as Buffer);
  }
  return Buffer.concat(chunks).toString('utf8');
}

function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  if (res.destroyed) return;
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(text)), ...headers });
  res.end(text);
}

function sendError(res: ServerResponse, err: unknown): void {
  const { status, body } = errorResponse(err);
  sendJson(res, status, body);
}

function listen(server: Server, port: number, host: string): Promise<void> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
}

/** snake_case admin fields to FaultSettings keys. */
const FAULT_FIELDS: Record<string, keyof FaultSettings> = {
  hang: 'hang', slow_factor: 'slowFactor', slowFactor: 'slowFactor', error_rate: 'errorRate', errorRate: 'errorRate',
  drop_event_rate: 'dropEventRate', dropEventRate: 'dropEventRate', drop_next_event_batches: 'dropNextEventBatches',
  dropNextEventBatches: 'dropNextEventBatches', reorder_events: 'reorderEvents', reorderEvents: 'reorderEvents',
};

function faultsToWire(f: Readonly<FaultSettings>): Record<string, unknown> {
  return {
    hang: f.hang, slow_factor: f.slowFactor, error_rate: f.errorRate, drop_event_rate: f.dropEventRate,
    drop_next_event_batches: f.dropNextEventBatches, reorder_events: f.reorderEvents,
  };
}

export class MockerWorker implements MockerHandle {
  readonly options: ResolvedMockerOptions;
  readonly tokenizer: TextTokenizer;
  readonly #faults: FaultController;
  readonly #metrics: EngineMetrics;
  readonly #sampleIds: Uint32Array;
  readonly #tokenText = new Map<number, string>();
  #ranks: Rank[] = [];
  #server: Server | undefined;
  #bootstrap: { registry: BootstrapRegistry; server: BootstrapServer } | undefined;
  #engineId = '';
  #crashed = true;
  #closed = false;
  /** Ports actually bound at first start, reused on restart. */
  #ports: { http: number; events: number[]; replay: number[]; bootstrap: number | undefined } | undefined;
  /** Aborts outgoing P/D calls on crash. */
  #lifetime = new AbortController();

  private constructor(options: ResolvedMockerOptions, tokenizer: TextTokenizer) {
    this.options = options;
    this.tokenizer = tokenizer;
    this.#faults = new FaultController(options.faults, options.seed);
    this.#metrics = new EngineMetrics(options, () => this.#ranks.map((r) => r.core.stats()));
    const sample = tokenizer.sampleVocabulary();
    this.#sampleIds = sample.ids;
    sample.ids.forEach((id, i) => this.#tokenText.set(id, sample.texts[i]!));
    this.#faults.onChange(() => {
      for (const r of this.#ranks) r.engine.wake();
    });
  }

  /** @throws KvgateError KVG_ERR_INVALID_CONFIG; socket errors (EADDRINUSE) as thrown by Node. */
  static async start(input: MockerInput = {}): Promise<MockerWorker> {
    const options = resolveMockerOptions(input);
    const worker = new MockerWorker(options, loadTokenizer(options.tokenizer));
    await worker.#bringUp();
    return worker;
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
    return `http://${this.host.includes(':') ? `[${this.host}]` : this.host}:${this.port}`;
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
    };
  }

  describe(): MockerEndpointInfo {
    const o = this.options;
    return {
      url: this.url, host: this.host, port: this.port, model: o.model, engine: o.engine, mode: o.mode, dp_size: o.dpSize,
      engine_id: this.#engineId, kv_events: [...this.kvEventsEndpoints], kv_events_ports: [...this.kvEventsPorts],
      kv_events_replay: [...this.replayEndpoints], kv_events_replay_ports: [...this.replayPorts], kv_events_encoding: o.kvEventsEncoding,
      block_size: o.blockSize, bootstrap_port: this.bootstrapPort ?? null, timing_model: o.timing.label,
    };
  }

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

  // ------------------------------------------------------------ lifecycle

  async #bringUp(): Promise<void> {
    const o = this.options;
    const ports = this.#ports;
    this.#engineId = randomUUID();
    this.#lifetime = new AbortController();
    const ranks: Rank[] = [];
    try {
      for (let i = 0; i < o.dpSize; i++) {
        const core = new EngineCore(engineCoreOptions(o, this.#sampleIds, i));
        let publisher: KvEventPublisher | undefined;
        if (o.kvEvents) {
          publisher = await KvEventPublisher.bind({
            host: o.host,
            port: ports?.events[i] ?? (o.kvEventsPort > 0 ? o.kvEventsPort + i : 0),
            replayPort: o.kvEventsReplayPort === undefined ? undefined : ports?.replay[i] ?? (o.kvEventsReplayPort > 0 ? o.kvEventsReplayPort + i : 0),
            topic: o.kvEventsTopic, rank: i, bufferSteps: o.kvEventsBufferSteps, hwm: o.kvEventsHwm,
            encoding: { encoding: o.kvEventsEncoding, flavour: o.engine }, faults: this.#faults,
          });
        }
        const rank: Rank = { index: i, core, publisher, engine: undefined as unknown as RealtimeEngine };
        rank.engine = new RealtimeEngine(core, { faults: this.#faults, onStep: (r) => this.#onStep(rank, r) });
        ranks.push(rank);
      }
      const server = createServer({ keepAlive: true });
      server.on('request', (req, res) => void this.#handle(req, res));
      await listen(server, ports?.http ?? o.port, o.host);
      this.#server = server;
      if (o.engine === 'sglang' && o.mode === 'prefill') {
        const registry = new BootstrapRegistry(o.bootstrapTimeoutMs);
        const bs = await BootstrapServer.listen(o.host, ports?.bootstrap ?? o.bootstrapPort, registry, () => ({ dp_size: o.dpSize, engine_id: this.#engineId }));
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

  #onStep(rank: Rank, r: StepResult): void {
    if (rank.publisher === undefined || r.kvEvents.length === 0) return;
    const out = rank.publisher.publish(r.kvEvents, Date.now() / 1000);
    if (out !== undefined) this.#metrics.countEventBatch(rank.index, out.dropped ? 'dropped' : 'sent');
  }

  // ------------------------------------------------------------ HTTP

  async #handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const path = (req.url ?? '/').split('?')[0]!;
    const method = req.method ?? 'GET';
    try {
      if (path.startsWith('/admin/')) return await this.#admin(method, path, req, res);
      await this.#faults.whenNotHung();
      if (this.#crashed) return void res.destroy();
      const route = `${method} ${path}`;
      switch (route) {
        case 'GET /health':
          res.writeHead(200, { 'content-length': '0' });
          return void res.end();
        case 'GET /v1/models':
          return sendJson(res, 200, this.#models());
        case 'GET /metrics': {
          const text = await this.#metrics.render();
          res.writeHead(200, { 'content-type': this.#metrics.contentType });
          return void res.end(text);
        }
        case 'POST /v1/completions':
          return await this.#generate('completion', req, res);
        case 'POST /v1/chat/completions':
          return await this.#generate('chat', req, res);
        case 'POST /tokenize':
          return await this.#tokenizeEndpoint(req, res);
        case 'POST /detokenize':
          return await this.#detokenizeEndpoint(req, res);
        case 'POST /reset_prefix_cache':
          return sendJson(res, 200, { success: this.resetPrefixCache() });
        case `POST ${KV_PULL_PATH}`:
          return await this.#pull(req, res);
        case 'GET /server_info':
        case 'GET /get_server_info':
          if (this.options.engine === 'sglang') return sendJson(res, 200, this.#serverInfo());
          break;
      }
      const known = ['/health', '/v1/models', '/metrics', '/v1/completions', '/v1/chat/completions', '/tokenize', '/detokenize', '/reset_prefix_cache', KV_PULL_PATH];
      if (known.includes(path)) throw new KvgateError('KVG_ERR_METHOD_NOT_ALLOWED', `${method} is not allowed on ${path}`, {});
      throw new KvgateError('KVG_ERR_NOT_FOUND', `no route ${method} ${path}`, {});
    } catch (err) {
      if (err instanceof BodyTooLarge) return sendError(res, new KvgateError('KVG_ERR_BODY_TOO_LARGE', `request body exceeds ${MAX_BODY_BYTES} bytes`, {}));
      if (!res.headersSent) sendError(res, err);
      else res.destroy();
    }
  }

  async #admin(method: string, path: string, req: IncomingMessage, res: ServerResponse): Promise<void> {
    const route = `${method} ${path}`;
    switch (route) {
      case 'GET /admin/faults':
        return sendJson(res, 200, { faults: faultsToWire(this.#faults.settings) });
      case 'POST /admin/faults': {
        const raw = await readBody(req);
        let body: unknown;
        try {
          body = JSON.parse(raw);
        } catch {
          throw new KvgateError('KVG_ERR_INVALID_JSON', 'the request body is not valid JSON', {});
        }
        if (typeof body !== 'object' || body === null || Array.isArray(body)) throw new KvgateError('KVG_ERR_INVALID_REQUEST', 'expected a JSON object of faults', {});
        const partial: Record<string, unknown> = {};
        for (const [k, v] of Object.entries(body)) {
          const key = FAULT_FIELDS[k];
          if (key === undefined) throw new KvgateError('KVG_ERR_INVALID_REQUEST', `unknown fault ${k}`, { param: k });
          partial[key] = v;
        }
        try {
          return sendJson(res, 200, { faults: faultsToWire(this.#faults.update(partial as Partial<FaultSettings>)) });
        } catch (err) {
          throw new KvgateError('KVG_ERR_INVALID_REQUEST', (err as Error).message, {});
        }
      }
      case 'POST /admin/crash':
        res.once('finish', () => void this.crash());
        return sendJson(res, 202, { crashing: true }, { connection: 'close' });
      case 'POST /admin/restart_event_sequence':
        this.restartEventSequence();
        return sendJson(res, 200, { next_seq: 0 });
      case 'GET /admin/state':
        return sendJson(res, 200, { ...this.describe(), ...this.stats(), faults: faultsToWire(this.#faults.settings) });
    }
    throw new KvgateError('KVG_ERR_NOT_FOUND', `no admin route ${method} ${path}`, {});
  }

  #models(): Record<string, unknown> {
    const o = this.options;
    const created = Math.floor(Date.now() / 1000);
    const entry = (id: string, parent: string | null): Record<string, unknown> => ({
      id, object: 'model', created, owned_by: o.engine, root: parent ?? id, parent, max_model_len: o.maxModelLen, permission: [],
    });
    return { object: 'list', data: [entry(o.model, null), ...o.loraNames.map((n) => entry(n, o.model))] };
  }

  #serverInfo(): Record<string, unknown> {
    const o = this.options;
    return {
      model_path: o.model, served_model_name: o.model, page_size: o.blockSize, dp_size: o.dpSize, disaggregation_mode: o.mode === 'aggregated' ? 'null' : o.mode,
      disaggregation_bootstrap_port: this.bootstrapPort ?? null,
      kv_events: o.kvEvents
        ? { publisher: 'zmq', endpoint_host: this.host, port_base: this.kvEventsPorts[0] ?? null, ports: this.kvEventsPorts, topic: o.kvEventsTopic, block_size: o.blockSize, dp_size: o.dpSize }
        : null,
    };
  }

  async #readJsonBody(req: IncomingMessage): Promise<{ raw: string; body: unknown }> {
    const raw = await readBody(req);
    try {
      return { raw, body: JSON.parse(raw) as unknown };
    } catch (err) {
      throw new KvgateError('KVG_ERR_INVALID_JSON', `the request body is not valid JSON: ${(err as Error).message}`, {});
    }
  }

  /** The prompt as token ids: token-id prompts as given, text and chat through the tokenizer. */
  async #promptTokens(p: GenerateRequest): Promise<number[]> {
    if (p.prompt.kind === 'tokens') {
      const vocab = this.tokenizer.vocabSize;
      const i = p.prompt.tokens.findIndex((t) => t >= vocab);
      if (i >= 0) throw new KvgateError('KVG_ERR_INVALID_REQUEST', `token id ${p.prompt.tokens[i]} at index ${i} is out of vocabulary (size ${vocab})`, { param: 'prompt' });
      return p.prompt.tokens;
    }
    if (p.prompt.kind === 'text') return this.tokenizer.encode(p.prompt.text, { addSpecialTokens: p.addSpecialTokens });
    let text: string;
    try {
      text = this.tokenizer.renderChat(p.prompt.messages, { addGenerationPrompt: true, tools: p.prompt.tools, extra: p.prompt.templateKwargs });
    } catch (err) {
      if (err instanceof KvgateError && err.code === 'KVG_ERR_INVALID_ARGUMENT') throw new KvgateError('KVG_ERR_INVALID_REQUEST', err.message, { param: 'messages' });
      throw err;
    }
    return this.tokenizer.encode(text, { addSpecialTokens: p.addSpecialTokens });
  }

  #pickRank(p: GenerateRequest, req: IncomingMessage, forced: number | undefined): number {
    const header = req.headers['x-data-parallel-rank'];
    const fromHeader = typeof header === 'string' && /^\d+$/.test(header) ? Number(header) : undefined;
    const rank = forced ?? p.dpRank ?? fromHeader;
    if (rank !== undefined) {
      if (rank >= this.#ranks.length) {
        throw new KvgateError('KVG_ERR_INVALID_DP_RANK', `data-parallel rank ${rank} does not exist (dp_size ${this.#ranks.length})`, { param: 'data_parallel_rank' });
      }
      return rank;
    }
    // vLLM's internal DP balancer: the least loaded rank, lowest index on ties.
    let best = 0;
    for (let i = 1; i < this.#ranks.length; i++) if (this.#ranks[i]!.engine.load < this.#ranks[best]!.engine.load) best = i;
    return best;
  }

  #derivedSeed(tokens: readonly number[]): number {
    const bytes = new Uint8Array(Uint32Array.from(tokens).buffer);
    return Number(xxh3(bytes, BigInt(this.options.seed)) & 0xffffffffn);
  }

  async #generate(kind: 'completion' | 'chat', req: IncomingMessage, res: ServerResponse): Promise<void> {
    const arrival = performance.now();
    const { raw, body } = await this.#readJsonBody(req);
    if (this.#faults.shouldFailRequest()) {
      this.#metrics.countInjectedError();
      throw new KvgateError('KVG_ERR_INTERNAL', 'injected fault: the engine failed this request (error_rate)', {});
    }
    const o = this.options;
    const p = parseGenerateRequest(kind, body, raw);
    if (p.model !== undefined && p.model !== o.model && !o.loraNames.includes(p.model)) {
      throw new KvgateError('KVG_ERR_MODEL_NOT_FOUND', `The model \`${p.model}\` does not exist.`, { param: 'model' });
    }
    const loraName = p.model !== undefined && p.model !== o.model ? p.model : undefined;
    const tokens = await this.#promptTokens(p);
    if (tokens.length === 0) throw new KvgateError('KVG_ERR_INVALID_REQUEST', 'the prompt is empty after tokenization', { param: kind === 'chat' ? 'messages' : 'prompt' });
    let maxTokens = p.maxTokens ?? o.defaultMaxTokens;
    if (tokens.length + maxTokens > o.maxModelLen) {
      throw new KvgateError('KVG_ERR_PROMPT_TOO_LONG',
        `This model's maximum context length is ${o.maxModelLen} tokens. However, you requested ${tokens.length + maxTokens} tokens (${tokens.length} in the messages, ${maxTokens} in the completion). Please reduce the length of the messages or completion.`,
        { param: kind === 'chat' ? 'messages' : 'prompt' });
    }
    const blocksNeeded = Math.ceil((tokens.length + maxTokens - 1) / o.blockSize);
    if (blocksNeeded > o.numGpuBlocks) {
      throw new KvgateError('KVG_ERR_INVALID_REQUEST',
        `the request needs ${blocksNeeded} KV blocks (${tokens.length} prompt + ${maxTokens} completion tokens) but the engine has ${o.numGpuBlocks}`,
        { param: kind === 'chat' ? 'messages' : 'prompt' });
    }

    // Client gone (or engine crash): cancel outgoing P/D calls and the engine request.
    const cancel = new AbortController();
    const onGone = (): void => cancel.abort();
    res.on('close', onGone);
    const lifetime = this.#lifetime.signal;
    const signal = AbortSignal.any([cancel.signal, lifetime]);

    let remotePrefill = false;
    let holdBlocksMs: number | undefined;
    let forcedRank: number | undefined;
    let sglangPrefill: { room: bigint; rank: number } | undefined;
    if (o.engine === 'vllm') {
      if (wantsRemoteDecode(p.kvTransferParams)) holdBlocksMs = o.kvLeaseMs;
      else if (o.mode === 'decode' || hasRemotePrefill(p.kvTransferParams)) {
        const ticket = parseRemotePrefillTicket(p.kvTransferParams);
        const n = await pullRemoteBlocks(ticket, 10_000, signal);
        if (n !== tokens.length) {
          throw new KvgateError('KVG_ERR_KV_TRANSFER_FAILED', `the prefill engine computed ${n} prompt tokens but this prompt has ${tokens.length} (stale or foreign kv_transfer_params)`, { param: 'kv_transfer_params' });
        }
        remotePrefill = true;
      }
    } else if (o.mode !== 'aggregated') {
      const b = p.bootstrap;
      if (b === undefined) {
        throw new KvgateError('KVG_ERR_INVALID_REQUEST', `this is a ${o.mode} engine: bootstrap_host, bootstrap_port and bootstrap_room are required`, { param: 'bootstrap_room' });
      }
      if (o.mode === 'prefill') {
        const rank = p.dpRank ?? Number(b.room % BigInt(o.dpSize));
        if (rank >= o.dpSize) throw new KvgateError('KVG_ERR_INVALID_DP_RANK', `data-parallel rank ${rank} does not exist (dp_size ${o.dpSize})`, { param: 'data_parallel_rank' });
        await this.#bootstrap!.registry.prefillArrived(b.room, rank);
        if (signal.aborted) {
          this.#bootstrap?.registry.prefillFailed(b.room, rank, new KvgateError('KVG_ERR_KV_TRANSFER_FAILED', 'the prefill request was cancelled', {}));
          return;
        }
        sglangPrefill = { room: b.room, rank };
        forcedRank = rank;
        maxTokens = 1;
      } else {
        const { promptTokens } = await rendezvousWithPrefill(b.host, b.port, b.room, signal);
        if (promptTokens !== tokens.length) {
          throw new KvgateError('KVG_ERR_KV_TRANSFER_FAILED', `the prefill engine computed ${promptTokens} prompt tokens but this prompt has ${tokens.length}`, { param: 'bootstrap_room' });
        }
        remotePrefill = true;
      }
    }
    if (signal.aborted) return;

    try {
      await this.#run(kind, p, req, res, { arrival, tokens, maxTokens, loraName, remotePrefill, holdBlocksMs, forcedRank, signal, sglangPrefill });
    } catch (err) {
      if (sglangPrefill !== undefined) this.#bootstrap?.registry.prefillFailed(sglangPrefill.room, sglangPrefill.rank, err);
      throw err;
    } finally {
      res.off('close', onGone);
    }
  }

  #run(
    kind: 'completion' | 'chat', p: GenerateRequest, req: IncomingMessage, res: ServerResponse,
    x: {
      arrival: number; tokens: number[]; maxTokens: number; loraName: string | undefined; remotePrefill: boolean;
      holdBlocksMs: number | undefined; forcedRank: number | undefined; signal: AbortSignal; sglangPrefill: { room: bigint; rank: number } | undefined;
    },
  ): Promise<void> {
    const o = this.options;
    const rankIndex = this.#pickRank(p, req, x.forcedRank);
    const rank = this.#ranks[rankIndex]!;
    const coreId = randomUUID();
    const header = req.headers['x-request-id'];
    const baseId = typeof header === 'string' && header !== '' ? header : randomUUID().replaceAll('-', '');
    const meta: ResponseMeta = { id: `${kind === 'chat' ? 'chatcmpl' : 'cmpl'}-${baseId}`, created: Math.floor(Date.now() / 1000), model: p.model ?? o.model };
    const coreReq: CoreRequest = {
      id: coreId, promptTokens: x.tokens, maxTokens: x.maxTokens, seed: p.seed ?? this.#derivedSeed(x.tokens),
      loraName: x.loraName, cacheSalt: p.cacheSalt, remotePrefill: x.remotePrefill, holdBlocksMs: x.holdBlocksMs,
    };
    const write = (obj: unknown): void => {
      if (!res.destroyed) res.write(`data: ${JSON.stringify(obj)}\n\n`);
    };

    return new Promise<void>((resolve, reject) => {
      let cached = 0;
      let text = '';
      let lastTokenAt = 0;
      let finished = false;
      const onAbort = (): void => {
        if (finished) return;
        finished = true;
        rank.engine.abort(coreId);
        if (!res.destroyed) res.destroy();
        resolve();
      };
      try {
        rank.engine.submit(coreReq, {
          onAdmitted: (c) => {
            cached = c;
          },
          onToken: (tokenId, index) => {
            const now = performance.now();
            if (index === 0) this.#metrics.observeFirstToken(rankIndex, (now - x.arrival) / 1000, 0);
            else this.#metrics.observeInterToken(rankIndex, (now - lastTokenAt) / 1000);
            lastTokenAt = now;
            const piece = this.#tokenText.get(tokenId) ?? '';
            if (!p.stream) {
              text += piece;
              return;
            }
            const last = index === x.maxTokens - 1;
            const u = p.continuousUsage ? usage(x.tokens.length, index + 1, cached) : undefined;
            write(kind === 'chat' ? chatChunk(meta, { content: piece }, last ? 'length' : null, u) : completionChunk(meta, piece, last ? 'length' : null, u));
          },
          onFinish: (info: FinishedRequest) => {
            finished = true;
            x.signal.removeEventListener('abort', onAbort);
            this.#metrics.observeFinished(rankIndex, (performance.now() - x.arrival) / 1000);
            const u = usage(info.promptTokens, info.outputTokens, info.cachedTokens);
            if (x.sglangPrefill !== undefined) this.#bootstrap?.registry.prefillDone(x.sglangPrefill.room, x.sglangPrefill.rank, { promptTokens: info.promptTokens });
            if (p.stream) {
              if (p.includeUsage) write(usageChunk(meta, kind, u));
              if (!res.destroyed) res.end('data: [DONE]\n\n');
            } else {
              let ktp: unknown = null;
              if (info.heldBlockIds !== undefined) {
                ktp = buildKvTransferParams({
                  engineId: this.#engineId, rank: rankIndex, requestId: coreId, blockIds: info.heldBlockIds, host: this.host, port: this.port,
                  numTokens: info.promptTokens, expiresAtUnixSeconds: Date.now() / 1000 + o.kvLeaseMs / 1000,
                });
              }
              sendJson(res, 200, kind === 'chat' ? chatResponse(meta, text, u, ktp) : completionResponse(meta, text, u, ktp));
            }
            resolve();
          },
        });
      } catch (err) {
        reject(err);
        return;
      }
      x.signal.addEventListener('abort', onAbort, { once: true });
      if (p.stream) {
        res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache', connection: 'keep-alive' });
        if (kind === 'chat') write(chatChunk(meta, { role: 'assistant', content: '' }, null, p.continuousUsage ? usage(x.tokens.length, 0, 0) : undefined));
      }
    });
  }

  async #tokenizeEndpoint(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const { raw, body } = await this.#readJsonBody(req);
    const b = body as Record<string, unknown>;
    const kind = b !== null && typeof b === 'object' && 'messages' in b ? 'chat' : 'completion';
    const p = parseGenerateRequest(kind, body, raw);
    const tokens = await this.#promptTokens(p);
    sendJson(res, 200, { count: tokens.length, max_model_len: this.options.maxModelLen, tokens, token_strs: null });
  }

  async #detokenizeEndpoint(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const { body } = await this.#readJsonBody(req);
    const tokens = (body as { tokens?: unknown } | null)?.tokens;
    if (!Array.isArray(tokens) || !tokens.every((t) => Number.isInteger(t) && t >= 0)) {
      throw new KvgateError('KVG_ERR_INVALID_REQUEST', 'tokens must be a list of token ids', { param: 'tokens' });
    }
    sendJson(res, 200, { prompt: await this.tokenizer.decode(tokens as number[]) });
  }

  /** The simulated NIXL read of a decode engine (see pd-vllm.ts). */
  async #pull(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const { body } = await this.#readJsonBody(req);
    const b = (body ?? {}) as { remote_engine_id?: unknown; remote_request_id?: unknown; remote_block_ids?: unknown };
    const refuse = (reason: string): void => sendJson(res, 409, { reason });
    if (typeof b.remote_engine_id !== 'string' || typeof b.remote_request_id !== 'string') return refuse('remote_engine_id and remote_request_id are required');
    const id = splitEngineId(b.remote_engine_id);
    if (id === undefined || id.engineId !== this.#engineId) {
      return refuse(`stale kv_transfer_params: engine ${b.remote_engine_id} is not this engine (${this.#engineId}); it may have restarted`);
    }
    const rank = this.#ranks[id.rank];
    if (rank === undefined) return refuse(`no data-parallel rank ${id.rank}`);
    const blockIds = Array.isArray(b.remote_block_ids) ? (b.remote_block_ids as number[]) : undefined;
    const result = rank.core.pullHeld(b.remote_request_id, blockIds, systemClock.now());
    rank.engine.wake();
    if (!result.ok) return refuse(result.reason);
    sendJson(res, 200, { num_tokens: result.numTokens });
  }
}

/**
 * Starts one simulated engine in this process.
 * @throws KvgateError KVG_ERR_INVALID_CONFIG for bad options; bind errors as Node reports them.
 */
export function startMocker(input: MockerInput = {}): Promise<MockerHandle> {
  return MockerWorker.start(input);
}
