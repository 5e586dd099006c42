/**
 * The real HTTP frontend (GatewayServer, preprocessing on the main thread
 * with the bundled demo tokenizer) in front of a disaggregated ModelRouter.
 * The config's workers describe the fleet for the frontend; routing uses the
 * ModelRouter's own registry (the router config here is the frontend's copy).
 */
import { pino } from 'pino';
import { loadGatewayConfig } from '../../../src/config/index.js';
import type { WorkerInfo } from '../../../src/discovery/index.js';
import {
  GatewayServer,
  createPreprocessor,
  preprocessModelSpecs,
  type Preprocessor,
} from '../../../src/frontend/index.js';
import type { KvgateMetrics } from '../../../src/metrics/index.js';
import type { ModelRouter } from '../../../src/routing/index.js';
import { BLOCK, MODEL } from './fleet.js';

export interface TestGateway {
  url: string;
  close(): Promise<void>;
}

function workerDoc(w: WorkerInfo): Record<string, unknown> {
  return {
    id: w.id,
    url: w.url,
    role: w.role,
    engine: w.dialect,
    dp_size: w.dpSize,
    ...(w.bootstrap !== undefined ? { bootstrap_host: w.bootstrap.host, bootstrap_port: w.bootstrap.port } : {}),
  };
}

export async function startGateway(
  router: ModelRouter,
  workers: readonly WorkerInfo[],
  metrics: KvgateMetrics,
  enforceDisagg = false,
): Promise<TestGateway> {
  const config = loadGatewayConfig({
    base: {
      listen: { port: 0 },
      router: { use_kv_events: false },
      preprocess: { threads: 0 },
      log: { level: 'silent' },
      models: [
        {
          name: MODEL,
          tokenizer: 'demo',
          block_size: BLOCK,
          engine: workers[0]!.dialect,
          enforce_disagg: enforceDisagg,
          workers: workers.map(workerDoc),
        },
      ],
    },
    env: {},
  });
  const preprocessor: Preprocessor = await createPreprocessor(preprocessModelSpecs(config), { threads: 0 });
  const server = new GatewayServer({
    config,
    routers: [router],
    preprocessor,
    logger: pino({ level: 'silent' }),
    metrics,
  });
  const addr = await server.listen();
  return {
    url: `http://127.0.0.1:${addr.public.port}`,
    async close() {
      await server.close({ drainTimeoutMs: 100 });
      await preprocessor.close();
    },
  };
}
