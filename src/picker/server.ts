/**
 * `PickerServer`: kvgate as a Gateway API Inference Extension endpoint picker.
 * One gRPC server carries Envoy's `ExternalProcessor` (one `Exchange` per
 * stream) and the gRPC health service (`liveness` always SERVING while the
 * process answers; `readiness`, `''` and the ext_proc service SERVING once the
 * pool's endpoints have been listed at least once, NOT_SERVING before and
 * while closing). One model, one InferencePool, one `EndpointPicker`.
 */
import { randomUUID } from 'node:crypto';
import {
  Server,
  ServerCredentials,
  status as GrpcStatus,
  type ServerDuplexStream,
  type ServerUnaryCall,
  type sendUnaryData,
} from '@grpc/grpc-js';
import type { Logger } from 'pino';
import type { Clock, Rng } from '../common/index.js';
import type { GatewayConfig } from '../config/index.js';
import { PublicErrors, type Preprocessor, type ServedModelConfig } from '../frontend/index.js';
import type { KvgateMetrics } from '../metrics/index.js';
import type { PoolEndpoint } from '../fleet/index.js';
import { EndpointPicker } from './endpoint-picker.js';
import { Exchange, type ExchangeOptions } from './exchange.js';
import {
  HEALTH_SERVICES,
  loadProtocol,
  serviceOf,
  type ProcessingRequest,
  type ProcessingResponse,
} from './protocol.js';

export interface PickerServerOptions {
  readonly model: ServedModelConfig;
  readonly preprocessor: Preprocessor;
  readonly metrics: KvgateMetrics;
  readonly logger: Logger;
  readonly clock: Clock;
  readonly rng: Rng;
  /** Endpoints in each answer (the pick and its fallbacks). */
  readonly fallbacks: number;
  /** Honour the GIE conformance hooks (`inference_pool.conformance_hooks`). */
  readonly conformanceHooks?: boolean | undefined;
  readonly maxBodyBytes: number;
  readonly maxMessages: number;
  /** KV-event ingestion bounds (the config's `kv_events`). */
  readonly kvEvents?: GatewayConfig['kvEvents'] | undefined;
}

const SERVING = 'SERVING';
const NOT_SERVING = 'NOT_SERVING';

export class PickerServer {
  readonly #server = new Server();
  readonly #picker: EndpointPicker;
  readonly #env: ExchangeOptions;
  readonly #opts: PickerServerOptions;
  /** The open streams, each with its exchange. */
  readonly #streams = new Map<ServerDuplexStream<ProcessingRequest, ProcessingResponse>, Exchange>();
  #synced = false;
  #closing = false;

  constructor(opts: PickerServerOptions) {
    this.#opts = opts;
    const model = opts.model;
    this.#picker = new EndpointPicker({ ...opts, model });
    const requests = opts.metrics.pickerRequests;
    this.#env = {
      picker: this.#picker,
      preprocessor: opts.preprocessor,
      modelView: {
        name: model.name,
        loraAdapters: [...model.loraAdapters],
        adapters: [...model.loraAdapters],
        maxPromptTokens: model.maxPromptTokens,
        anthropicInlineSystem: model.anthropicInlineSystem,
        workers: [],
      },
      maxBodyBytes: opts.maxBodyBytes,
      maxMessages: opts.maxMessages,
      fallbacks: opts.fallbacks,
      conformanceHooks: opts.conformanceHooks === true,
      rng: opts.rng,
      logger: opts.logger,
      publicErrors: new PublicErrors([model]),
      nextRequestId: () => randomUUID(),
      count: (outcome) => requests.labels({ model: model.name, outcome }).inc(),
    };
    const { extProc, health } = loadProtocol();
    this.#server.addService(serviceOf(extProc, 'ExternalProcessor').service, {
      Process: (call: ServerDuplexStream<ProcessingRequest, ProcessingResponse>) => this.#process(call),
    });
    this.#server.addService(serviceOf(health, 'Health').service, {
      Check: (call: ServerUnaryCall<{ service?: string }, unknown>, done: sendUnaryData<unknown>) =>
        this.#check(call.request.service ?? '', done),
      Watch: (call: ServerDuplexStream<unknown, unknown>) =>
        call.emit('error', { code: GrpcStatus.UNIMPLEMENTED, details: 'Watch is not served; poll Check' }),
    });
  }

  /** Listens on `host:port` (0: the OS chooses); resolves with the bound port. */
  listen(host: string, port: number): Promise<number> {
    return new Promise((resolve, reject) =>
      this.#server.bindAsync(`${host}:${port}`, ServerCredentials.createInsecure(), (err, bound) =>
        err === null ? resolve(bound) : reject(err),
      ),
    );
  }

  /**
   * The pool's ready endpoints now (the InferencePool source calls it on every change). Each join and leave is
   * counted, so a pod that turns NotReady and back between two scrapes shows though the gauge reads the same; so is
   * each endpoint handed over to another pod and each pod shadowed (two listed with one endpoint: `EndpointOwners`).
   */
  setEndpoints(pods: readonly PoolEndpoint[]): void {
    const change = this.#picker.setEndpoints(pods);
    const model = this.#opts.model.name;
    this.#opts.metrics.pickerEndpoints.labels({ model }).set(this.#picker.endpoints.length);
    const membership = this.#opts.metrics.workerMembership;
    for (const [kind, changed] of [
      ['joined', change.joined],
      ['left', change.left],
      ['handed_over', change.handedOver],
      ['shadowed', change.shadowed],
    ] as const)
      if (changed.length > 0) membership.labels({ model, source: 'inference_pool', change: kind }).inc(changed.length);
    if (!this.#synced) this.#opts.logger.info({ endpoints: change.joined }, 'picker ready: the pool is listed');
    this.#synced = true;
  }

  get picker(): EndpointPicker {
    return this.#picker;
  }

  /** Not ready from now on; open streams are cancelled (their bookings freed) and the server stops. */
  async close(): Promise<void> {
    this.#closing = true;
    for (const call of this.#streams.keys())
      call.emit('error', { code: GrpcStatus.UNAVAILABLE, details: 'the picker is stopping' });
    await new Promise<void>((resolve) => this.#server.tryShutdown(() => resolve()));
    await this.#picker.close();
  }

  #process(call: ServerDuplexStream<ProcessingRequest, ProcessingResponse>): void {
    this.#streams.set(call, new Exchange(this.#env, call));
    const forget = (): void => void this.#streams.delete(call);
    call.on('end', forget);
    call.on('error', forget);
    call.on('cancelled', forget);
  }

  /** Bytes of request bodies the open streams hold (each stream's until its body is complete). */
  bufferedBytes(): number {
    let n = 0;
    for (const exchange of this.#streams.values()) n += exchange.bufferedBytes;
    return n;
  }

  #check(service: string, done: sendUnaryData<unknown>): void {
    if (!(HEALTH_SERVICES as readonly string[]).includes(service)) {
      done({ code: GrpcStatus.NOT_FOUND, details: `unknown service ${service}` });
      return;
    }
    // Liveness is the process answering at all; the others wait for the pool and stop at close.
    const ready = service === 'liveness' || (this.#synced && !this.#closing);
    done(null, { status: ready ? SERVING : NOT_SERVING });
  }
}
