/** `kv_events.ingest_threads`: its default (none), a value from the file, its bounds, read only at start. */
import { describe, expect, it } from 'vitest';
import { loadGatewayConfig, reloadProblems } from '../../src/config/index.js';
import { isKvgateError } from '../../src/errors/index.js';

const models = [{ name: 'm', router_mode: 'round-robin', workers: [{ id: 1, url: 'http://10.0.0.1:8000' }] }];

describe('config: kv_events.ingest_threads', () => {
  it('defaults to none (ingestion on the main thread), whatever the cores and processes', () => {
    expect(loadGatewayConfig({ base: { models }, env: {} }).kvIngestThreads).toBe(0);
    expect(loadGatewayConfig({ base: { models, processes: 2 }, env: {} }).kvIngestThreads).toBe(0);
  });

  it('takes a value from the file, 0 keeping ingestion on the main thread, and leaves the bounds as they were', () => {
    const c = loadGatewayConfig({ base: { models, kv_events: { ingest_threads: 3, queue_batches: 500 } }, env: {} });
    expect(c.kvIngestThreads).toBe(3);
    expect(c.kvEvents.maxQueuedBatches).toBe(500);
    expect(loadGatewayConfig({ base: { models, kv_events: { ingest_threads: 0 } }, env: {} }).kvIngestThreads).toBe(0);
  });

  it('refuses a value outside 0..64 with its path', () => {
    for (const bad of [-1, 65, 1.5]) {
      try {
        loadGatewayConfig({ base: { models, kv_events: { ingest_threads: bad } }, env: {} });
        throw new Error('expected a rejection');
      } catch (err) {
        expect(isKvgateError(err, 'KVG_ERR_INVALID_CONFIG')).toBe(true);
        expect((err as Error).message).toMatch(/kv_events\.ingest_threads: must be an integer in \[0, 64\]/);
      }
    }
  });

  it('a reload cannot change it (the threads start with the process)', () => {
    const before = loadGatewayConfig({ base: { models, kv_events: { ingest_threads: 1 } }, env: {} });
    const after = loadGatewayConfig({ base: { models, kv_events: { ingest_threads: 2 } }, env: {} });
    expect(reloadProblems(before, after).map((p) => p.path)).toEqual(['kv_events.ingest_threads']);
  });
});
