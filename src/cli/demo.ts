/**
 * The embedded demo of `kvgate serve`: with no model configured, four in-process simulated engines (src/mocker) on
 * loopback, publishing KV events, serve the demo model with the bundled Qwen3 tokenizer, routed with KV-aware
 * routing; and the startup banner, with a curl command to try on the first model served (the demo's conversation).
 */
import type { GatewayConfig } from '../config/index.js';
import type { Gateway } from '../frontend/index.js';
import { startMocker, type MockerHandle } from '../mocker/index.js';

export const DEMO_MODEL = 'qwen3-demo';
export const DEMO_ENGINES = 4;
/**
 * The printed example's conversation: 66 tokens with the chat template, four full 16-token
 * blocks, so a second send is routed to the engine holding them and reports them cached (a prompt
 * shorter than one block has nothing to reuse). README's quick start shows the same request.
 */
const DEMO_MESSAGES =
  '[{"role": "system", "content": "You are a concise assistant for engineers who run language models in production."}, ' +
  '{"role": "user", "content": "Explain what a KV cache is, why reusing a cached prompt prefix cuts the time to first token, ' +
  'and how a router can send each request to the engine that already holds its prefix."}]';

/** The demo model's config entry, pointing at the given engines. */
function demoModels(engines: readonly { url: string; kvEvents: string }[]): Record<string, unknown> {
  return {
    models: [
      {
        name: DEMO_MODEL,
        tokenizer: 'demo',
        block_size: 16,
        workers: engines.map((e, i) => ({ id: i + 1, url: e.url, kv_events: e.kvEvents })),
      },
    ],
  };
}

async function startDemoEngines(blockSize: number): Promise<MockerHandle[]> {
  const started: MockerHandle[] = [];
  try {
    for (let i = 0; i < DEMO_ENGINES; i++) {
      started.push(
        await startMocker({
          model: DEMO_MODEL,
          tokenizer: 'demo',
          blockSize,
          kvEvents: true,
          seed: i + 1,
          host: '127.0.0.1',
        }),
      );
    }
  } catch (err) {
    await Promise.allSettled(started.map((m) => m.close()));
    throw err;
  }
  return started;
}

/** The startup banner: where kvgate serves what, and a request to try. */
export function banner(config: GatewayConfig, gateway: Gateway, demo: boolean): string {
  const url = `http://${gateway.addresses.public.host}:${gateway.addresses.public.port}`;
  const model = config.models[0]!;
  const lines = [
    '',
    demo
      ? `kvgate: serving the embedded demo at ${url}: model ${model.name} on ${model.workers.length} simulated engines ` +
        `(in-process, KV events on), ${model.routerMode} routing.`
      : `kvgate: serving ${config.models.map((m) => `${m.name} (${m.workers.length} workers, ${m.routerMode})`).join(', ')} at ${url}.`,
    'Try it (the x-kvgate-worker response header names the engine that served it; send the same conversation twice and it sticks):',
    `  curl -si ${url}/v1/chat/completions -H 'content-type: ` +
      `application/json'${config.apiKeys.length > 0 ? " -H 'authorization: Bearer <key>'" : ''} \\`,
    `    -d '{"model": "${model.name}", "messages": ${DEMO_MESSAGES}, "max_tokens": 32}'`,
    '',
  ];
  return lines.join('\n');
}

/**
 * The config to serve: the file and flags, or the embedded demo with its simulated engines started.
 * On a failure after the demo's engines started, they are closed before the error propagates.
 */
export async function resolveServeConfig(
  load: (base?: Record<string, unknown>) => GatewayConfig,
): Promise<{ config: GatewayConfig; mockers: MockerHandle[]; demo: boolean }> {
  const config = load();
  if (config.models.length > 0) return { config, mockers: [], demo: false };
  // Resolve the demo entry once with placeholder engines, so flags (--block-size, router knobs) are
  // validated and known before the engines start with the same block size.
  const planned = load(
    demoModels(
      Array.from({ length: DEMO_ENGINES }, (_, i) => ({
        url: `http://127.0.0.1:${i + 1}`,
        kvEvents: `tcp://127.0.0.1:${i + 1}`,
      })),
    ),
  );
  const mockers = await startDemoEngines(planned.models[0]!.blockSize);
  try {
    return {
      config: load(demoModels(mockers.map((m) => ({ url: m.url, kvEvents: m.kvEventsEndpoints[0]! })))),
      mockers,
      demo: true,
    };
  } catch (err) {
    await Promise.allSettled(mockers.map((m) => m.close()));
    throw err;
  }
}
