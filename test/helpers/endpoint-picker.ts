/**
 * An `EndpointPicker` over model `m` (the demo tokenizer, one InferencePool that is never reached) for the
 * picker's unit tests: `router` knobs, its log lines kept from `level` on, `metrics` and `clock` when given, and
 * `fallbacks` endpoints after the pick in its answers (1 unless given).
 */
import { pino } from 'pino';
import { ManualClock, seededRng } from '../../src/common/index.js';
import { loadGatewayConfig } from '../../src/config/index.js';
import type { KvgateMetrics } from '../../src/metrics/index.js';
import { EndpointPicker } from '../../src/picker/endpoint-picker.js';

export function pickerOf(
  opts: {
    router?: Record<string, unknown>;
    level?: string;
    metrics?: KvgateMetrics;
    clock?: ManualClock;
    fallbacks?: number;
  } = {},
): {
  picker: EndpointPicker;
  lines: Record<string, unknown>[];
} {
  const config = loadGatewayConfig({
    env: {},
    base: {
      models: [
        {
          name: 'm',
          tokenizer: 'demo',
          ...(opts.router !== undefined ? { router: opts.router } : {}),
          inference_pool: { api_server: 'http://127.0.0.1:1', name: 'pool', token_file: '/x', ca_file: '/x' },
        },
      ],
    },
  });
  const lines: Record<string, unknown>[] = [];
  const logger = pino({ level: opts.level ?? 'info' }, { write: (s: string) => void lines.push(JSON.parse(s)) });
  const picker = new EndpointPicker({
    ...(opts.metrics !== undefined ? { metrics: opts.metrics } : {}),
    model: config.models[0]!,
    logger,
    clock: opts.clock ?? new ManualClock(0),
    rng: seededRng(1),
    fallbacks: opts.fallbacks ?? 1,
  });
  return { picker, lines };
}
