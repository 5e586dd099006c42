/** `engine_connections.max_per_worker`: the size of each worker's engine pool (it was fixed at 256, with no key). */
import { describe, expect, it } from 'vitest';
import { loadGatewayConfig, parseServeFlags, reloadProblems } from '../../src/config/index.js';
import { isKvgateError } from '../../src/errors/index.js';

const model = { name: 'm', router_mode: 'round-robin', workers: [{ id: 1, url: 'http://10.0.0.1:8000' }] };
const load = (base: Record<string, unknown>, overrides?: ReturnType<typeof parseServeFlags>['overrides']) =>
  loadGatewayConfig({ base: { models: [model], ...base }, overrides, env: {} });

describe('config: engine_connections', () => {
  it('defaults to 256 per worker; the section and --set change it', () => {
    expect(load({}).engineConnections).toEqual({ maxPerWorker: 256 });
    expect(load({ engine_connections: { max_per_worker: 8 } }).engineConnections).toEqual({ maxPerWorker: 8 });
    const flags = parseServeFlags(['--set', 'engine_connections.max_per_worker=1']);
    expect(load({}, flags.overrides).engineConnections.maxPerWorker).toBe(1);
  });

  it.each([0, -3, 2.5, 'many', 100_000])('refuses max_per_worker %s, naming the key', (value) => {
    try {
      load({ engine_connections: { max_per_worker: value } });
      throw new Error('expected a rejection');
    } catch (err) {
      expect(isKvgateError(err, 'KVG_ERR_INVALID_CONFIG')).toBe(true);
      expect((err as Error).message).toMatch(/engine_connections\.max_per_worker: must be an integer in \[1, 65536\]/);
    }
  });

  it('names an unknown field of the section', () => {
    expect(() => load({ engine_connections: { max_connections: 4 } })).toThrow(/engine_connections\.max_connections/);
  });

  it('a reload cannot change it (each worker pool is sized as it opens)', () => {
    const problems = reloadProblems(load({}), load({ engine_connections: { max_per_worker: 64 } }));
    expect(problems.map((p) => p.path)).toEqual(['engine_connections.max_per_worker']);
  });
});
