/** What the picker suites share: `kvgate picker`'s config for one InferencePool (of the Kubernetes API double). */
import { loadGatewayConfig, type GatewayConfig } from '../../../src/config/index.js';

export const MODEL = 'mock-model';

/**
 * The model `mock-model` over InferencePool `pool` at `apiServer`: KV events off (approximate) unless `router` turns
 * them on, no pool threads; `sections` adds top-level config sections (`admin`, `kv_events`), `poolFields` fields of
 * the `inference_pool` section (`conformance_hooks`).
 */
export function pickerConfig(
  apiServer: string,
  pool: string,
  router: Record<string, unknown> = {},
  sections: Record<string, unknown> = {},
  poolFields: Record<string, unknown> = {},
): GatewayConfig {
  return loadGatewayConfig({
    env: {},
    base: {
      ...sections,
      listen: { host: '127.0.0.1', port: 0 },
      preprocess: { threads: 0 },
      models: [
        {
          name: MODEL,
          tokenizer: 'demo',
          router: { use_kv_events: false, ...router },
          inference_pool: {
            api_server: apiServer,
            name: pool,
            token_file: '/nonexistent',
            ca_file: '/nonexistent',
            ...poolFields,
          },
        },
      ],
    },
  });
}
