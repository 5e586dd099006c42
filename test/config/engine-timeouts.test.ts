/** The per-model engine leg timeouts in the config: defaults, global section, per-model override, flags, errors (issue 13 item 9). */
import { describe, expect, it } from 'vitest';
import { loadGatewayConfig, parseServeFlags } from '../../src/config/index.js';
import { isKvgateError } from '../../src/errors/index.js';

const model = (name: string, extra: Record<string, unknown> = {}): Record<string, unknown> => ({
  name,
  router_mode: 'round-robin',
  workers: [{ id: name.length, url: `http://10.0.0.${name.length}:8000` }],
  ...extra,
});

describe('config: engine_timeouts', () => {
  it("defaults to 60 s to first output and 30 s stream idle; a global section and a model's own section override field by field", () => {
    const c = loadGatewayConfig({
      base: {
        engine_timeouts: { first_byte_timeout_ms: 90_000 },
        models: [model('a'), model('bb', { engine_timeouts: { stream_idle_timeout_ms: 0 } })],
      },
      env: {},
    });
    expect(c.models[0]!.engineTimeouts).toEqual({ firstByteMs: 90_000, streamIdleMs: 30_000 });
    expect(c.models[1]!.engineTimeouts).toEqual({ firstByteMs: 90_000, streamIdleMs: 0 });
    expect(loadGatewayConfig({ base: { models: [model('a')] }, env: {} }).models[0]!.engineTimeouts).toEqual({
      firstByteMs: 60_000,
      streamIdleMs: 30_000,
    });
  });

  it('flags set the global section', () => {
    const flags = parseServeFlags([
      '--engine-first-byte-timeout-ms',
      '5000',
      '--engine-stream-idle-timeout-ms',
      '2500',
    ]);
    const c = loadGatewayConfig({ base: { models: [model('a')] }, overrides: flags.overrides, env: {} });
    expect(c.models[0]!.engineTimeouts).toEqual({ firstByteMs: 5000, streamIdleMs: 2500 });
  });

  it('a bad value or an unknown field is named with its path', () => {
    try {
      loadGatewayConfig({
        base: { models: [model('a', { engine_timeouts: { first_byte_timeout_ms: -1, idle_ms: 5 } })] },
        env: {},
      });
      throw new Error('expected a rejection');
    } catch (err) {
      expect(isKvgateError(err, 'KVG_ERR_INVALID_CONFIG')).toBe(true);
      expect((err as Error).message).toMatch(/models\[0\]\.engine_timeouts\.first_byte_timeout_ms/);
      expect((err as Error).message).toMatch(/models\[0\]\.engine_timeouts\.idle_ms/);
    }
  });
});
