/**
 * A model's `inference_pool` section (`kvgate picker`): `conformance_hooks` is off unless set, since with the
 * hooks on any client could name its own pod (`test-epp-endpoint-selection`); a value that is not a boolean is
 * refused naming the field.
 */
import { describe, expect, it } from 'vitest';
import { loadGatewayConfig } from '../../src/config/index.js';
import { isKvgateError } from '../../src/errors/index.js';

const pool = (fields: Record<string, unknown> = {}): Record<string, unknown> => ({
  models: [
    {
      name: 'm',
      tokenizer: 'demo',
      inference_pool: { api_server: 'http://127.0.0.1:1', name: 'pool', token_file: '/x', ca_file: '/x', ...fields },
    },
  ],
});

describe('inference_pool.conformance_hooks', () => {
  it('is off by default, on when set', () => {
    const off = loadGatewayConfig({ base: pool(), env: {} });
    expect(off.models[0]!.inferencePool).toMatchObject({ conformanceHooks: false, fallbacks: 3 });
    const on = loadGatewayConfig({ base: pool({ conformance_hooks: true }), env: {} });
    expect(on.models[0]!.inferencePool?.conformanceHooks).toBe(true);
  });

  it('refuses a value that is not a boolean, naming the field', () => {
    let problems: { path: string }[] = [];
    try {
      loadGatewayConfig({ base: pool({ conformance_hooks: 'yes' }), env: {} });
    } catch (err) {
      expect(isKvgateError(err, 'KVG_ERR_INVALID_CONFIG')).toBe(true);
      problems = (err as { detail: { problems: { path: string }[] } }).detail.problems;
    }
    expect(problems.map((p) => p.path)).toEqual(['models[0].inference_pool.conformance_hooks']);
  });
});
