/**
 * `startPicker`: the composition of `kvgate picker` from a validated config:
 * the model that names an `inference_pool`, its preprocessor (the gateway's:
 * same template, tokenizer and hashing), the `PickerServer` on the `listen`
 * address (gRPC: ext_proc and health), the `InferencePoolSource` feeding it,
 * and, with `admin.enabled`, `/metrics` on the admin listener (or on
 * `admin.port`'s default host when none is set: the picker's `listen` is gRPC).
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Logger } from 'pino';
import { seededRng, systemClock } from '../common/index.js';
import type { GatewayConfig, ModelConfig } from '../config/index.js';
import type { SlotLoad } from '../core/index.js';
import { KvgateError } from '../errors/index.js';
import { InferencePoolSource } from '../fleet/index.js';
import { createPreprocessor, preprocessModelSpecs, servedModelConfig, settleInlineSystem } from '../frontend/index.js';
import { KvgateMetrics } from '../metrics/index.js';
import { PickerServer } from './server.js';

export interface RunningPicker {
  /** The gRPC address bound (`host:port`). */
  readonly address: string;
  /** `http://host:port/metrics`, when admin is enabled. */
  readonly metricsUrl: string | undefined;
  /** Requests booked and not yet ended, by endpoint. */
  bookings(): Record<string, number>;
  /** The router's load on each routed endpoint (`EndpointPicker.loads`): what it scores on, each request once. */
  loads(): Record<string, SlotLoad>;
  /** Bytes of request bodies the open streams hold (a body is held only until it is complete). */
  bufferedBytes(): number;
  /** What the picker keeps per pod, by structure (`EndpointPicker.footprint`). */
  footprint(): Record<string, number>;
  stop(): Promise<void>;
}

/** The one model the picker serves: the one with an `inference_pool`. */
function pickerModel(
  config: GatewayConfig,
): ModelConfig & { inferencePool: NonNullable<ModelConfig['inferencePool']> } {
  const pooled = config.models.filter((m) => m.inferencePool !== undefined);
  if (pooled.length !== 1) {
    throw new KvgateError(
      'KVG_ERR_INVALID_CONFIG',
      `kvgate picker serves one model with an inference_pool section; the config has ${pooled.length}`,
      { source: 'models', reason: 'inference_pool' },
    );
  }
  return pooled[0] as ModelConfig & { inferencePool: NonNullable<ModelConfig['inferencePool']> };
}

async function metricsServer(config: GatewayConfig, metrics: KvgateMetrics): Promise<Server | undefined> {
  if (!config.admin.enabled) return undefined;
  const server = createServer((req, res) => {
    if (req.method !== 'GET' || req.url !== '/metrics') return void res.writeHead(404).end();
    void metrics.registry.metrics().then((text) => {
      res.writeHead(200, { 'content-type': metrics.registry.contentType }).end(text);
    });
  });
  const at = config.admin.listen ?? { host: config.listen.host, port: 0 };
  await new Promise<void>((resolve, reject) => server.once('error', reject).listen(at.port, at.host, resolve));
  return server;
}

/** Starts the picker; rejects (nothing left running) when the config or an address is refused. */
export async function startPicker(config: GatewayConfig, logger: Logger): Promise<RunningPicker> {
  const model = pickerModel(config);
  const metrics = new KvgateMetrics();
  const preprocessor = await createPreprocessor(preprocessModelSpecs(config), {
    threads: config.preprocess.threads,
    taskTimeoutMs: config.preprocess.taskTimeoutMs,
  });
  const server = new PickerServer({
    model: servedModelConfig(model, await settleInlineSystem([model], preprocessor, logger)),
    preprocessor,
    metrics,
    logger,
    clock: systemClock,
    rng: seededRng(Date.now() >>> 0),
    fallbacks: model.inferencePool.fallbacks,
    conformanceHooks: model.inferencePool.conformanceHooks,
    maxBodyBytes: config.limits.maxBodyBytes,
    maxMessages: config.limits.maxMessages,
    kvEvents: config.kvEvents,
  });
  const source = new InferencePoolSource(model.name, model.inferencePool, (endpoints) =>
    server.setEndpoints(endpoints),
  );
  let http: Server | undefined;
  try {
    const port = await server.listen(config.listen.host, config.listen.port);
    http = await metricsServer(config, metrics);
    source.start(logger, metrics);
    const host = config.listen.host.includes(':') ? `[${config.listen.host}]` : config.listen.host;
    const m = http?.address() as AddressInfo | undefined;
    return {
      address: `${host}:${port}`,
      metricsUrl:
        m === undefined
          ? undefined
          : `http://${m.address.includes(':') ? `[${m.address}]` : m.address}:${m.port}/metrics`,
      bookings: () => server.picker.bookings(),
      loads: () => server.picker.loads(),
      bufferedBytes: () => server.bufferedBytes(),
      footprint: () => server.picker.footprint(),
      async stop() {
        await source.close();
        await server.close();
        http?.close();
        await preprocessor.close();
      },
    };
  } catch (err) {
    await source.close();
    await server.close();
    http?.close();
    await preprocessor.close();
    throw err;
  }
}
