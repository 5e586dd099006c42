/** A model's `panic_threshold_percent` (issue 23, section 2): Envoy's default 50, 0 to 100, read only at start. */
import { describe, expect, it } from 'vitest';
import { loadGatewayConfig, reloadProblems } from '../../src/config/index.js';
import { isKvgateError } from '../../src/errors/index.js';

const model = (name: string, extra: Record<string, unknown> = {}): Record<string, unknown> => ({
  name,
  router_mode: 'round-robin',
  workers: [{ id: name.length, url: `http://10.0.0.${name.length}:8000` }],
  ...extra,
});

describe('config: panic_threshold_percent', () => {
  it('defaults to 50 per model; a model sets its own, 0 turns panic off', () => {
    const c = loadGatewayConfig({
      base: {
        models: [
          model('a'),
          model('bb', { panic_threshold_percent: 0 }),
          model('ccc', { panic_threshold_percent: 100 }),
        ],
      },
      env: {},
    });
    expect(c.models.map((m) => m.panicThresholdPercent)).toEqual([50, 0, 100]);
  });

  it('a value outside 0..100 is refused with its path', () => {
    try {
      loadGatewayConfig({ base: { models: [model('a', { panic_threshold_percent: 101 })] }, env: {} });
      throw new Error('expected a rejection');
    } catch (err) {
      expect(isKvgateError(err, 'KVG_ERR_INVALID_CONFIG')).toBe(true);
      expect((err as Error).message).toMatch(
        /models\[0\]\.panic_threshold_percent: must be an integer in \[0, 100\], got 101/,
      );
    }
  });

  it("a reload cannot change it (read when the model's health checking is built)", () => {
    const before = loadGatewayConfig({ base: { models: [model('a')] }, env: {} });
    const after = loadGatewayConfig({ base: { models: [model('a', { panic_threshold_percent: 25 })] }, env: {} });
    expect(reloadProblems(before, after).map((p) => p.path)).toEqual(['models[0].panic_threshold_percent']);
  });
});
