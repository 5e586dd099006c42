/**
 * The in-process mocker's public face: what `startMocker` returns, what
 * `kvgate mocker` prints per engine, and the stats /admin/state serves.
 * Types only; MockerWorker (worker.ts) implements them.
 */
import type { EngineDialect, WorkerRole } from '../common/index.js';
import type { TextTokenizer } from '../tokenizer/index.js';
import type { EngineCoreStats } from './engine-types.js';
import type { FaultSettings, FilledMockerOptions } from './options.js';

/** What `kvgate mocker` prints per engine (one JSON line) and `describe()` returns. */
export interface MockerEndpointInfo {
  url: string;
  host: string;
  port: number;
  model: string;
  engine: EngineDialect;
  mode: WorkerRole;
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

/** One inference request's W3C trace context as the engine received it. */
export interface MockerTraced {
  path: string;
  traceparent: string;
  tracestate?: string;
}

export interface MockerStats {
  crashed: boolean;
  ranks: (EngineCoreStats & { nextEventSeq: number | null; eventBatchesSent: number; eventBatchesDropped: number })[];
  bootstrapPending: number;
  /** The `traceparent` headers of the last 16 inference requests (generation, embeddings), newest last. */
  traceparents: string[];
  /** The same requests' paths and W3C trace-context headers (`tracestate` when sent), newest last. */
  traced: MockerTraced[];
}

/** An in-process mocker. Every method is safe to call after close (it does nothing or throws a clear error). */
export interface MockerHandle {
  readonly options: FilledMockerOptions;
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
