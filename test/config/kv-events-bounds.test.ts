/**
 * The operator's KV-event bounds beyond the stream's cursor rules: `kv_events.pending_batches`,
 * `replay_timeout_ms`, `receive_high_water_mark`, `max_message_bytes`, `max_replay_bytes`,
 * `max_batch_elements` and `max_kv_groups`. Defaults equal src/events' own (the fleet hands the section to each model's ingestion
 * field for field, so every field must be one ingestion reads), values from the file, a problem naming each bad
 * key, and a reload cannot change them. That a value reaches ingestion: test/integration/events/kv-events-bounds.test.ts.
 */
import { describe, expect, it } from 'vitest';
import { GATEWAY_DEFAULTS, loadGatewayConfig, reloadProblems, type ConfigProblem } from '../../src/config/index.js';
import { isKvgateError } from '../../src/errors/index.js';
import { kDefaultKvEventOptions } from '../../src/events/options.js';

const models = [{ name: 'm', router_mode: 'round-robin', workers: [{ id: 1, url: 'http://10.0.0.1:8000' }] }];
const load = (kvEvents: Record<string, unknown>) =>
  loadGatewayConfig({ base: { models, kv_events: kvEvents }, env: {} });

function problems(kvEvents: Record<string, unknown>): Record<string, string> {
  try {
    load(kvEvents);
  } catch (err) {
    expect(isKvgateError(err, 'KVG_ERR_INVALID_CONFIG')).toBe(true);
    const ps = (err as { detail: { problems: ConfigProblem[] } }).detail.problems;
    return Object.fromEntries(ps.map((p) => [p.path, p.reason]));
  }
  throw new Error('expected the config to be rejected');
}

describe('config: kv_events ingestion bounds', () => {
  it("defaults to src/events' own values, and every field is one ingestion reads", () => {
    const d = loadGatewayConfig({ base: { models }, env: {} }).kvEvents;
    expect(d).toEqual(GATEWAY_DEFAULTS.kvEvents);
    for (const [key, value] of Object.entries(d))
      expect([key, kDefaultKvEventOptions[key as 'maxQueuedBatches']]).toEqual([key, value]);
  });

  it('takes each value from the file', () => {
    const c = load({
      pending_batches: 500,
      replay_timeout_ms: 750,
      receive_high_water_mark: 2000,
      max_message_bytes: 8 * 2 ** 20,
      max_replay_bytes: 64 * 2 ** 20,
      max_batch_elements: 4096,
      max_kv_groups: 4,
    }).kvEvents;
    expect(c).toMatchObject({
      maxPendingBatches: 500,
      replayTimeoutMs: 750,
      receiveHighWaterMark: 2000,
      maxMessageBytes: 8 * 2 ** 20,
      maxReplyBytes: 64 * 2 ** 20,
      maxBatchElements: 4096,
      maxKvGroups: 4,
      maxQueuedBatches: 10_000,
    });
  });

  it('refuses a value out of range with a problem naming the key', () => {
    const by = problems({
      pending_batches: 0,
      replay_timeout_ms: 'soon',
      receive_high_water_mark: 0,
      max_message_bytes: 10,
      max_replay_bytes: 1.5,
      max_batch_elements: 2 ** 40,
      max_kv_groups: 0,
    });
    expect(by).toEqual({
      'kv_events.pending_batches': 'must be an integer in [1, 10000000], got 0',
      'kv_events.replay_timeout_ms': 'must be an integer in [1, 600000], got "soon"',
      'kv_events.receive_high_water_mark': 'must be an integer in [1, 10000000], got 0',
      'kv_events.max_message_bytes': 'must be an integer in [1024, 2147483648], got 10',
      'kv_events.max_replay_bytes': 'must be an integer in [1024, 68719476736], got 1.5',
      'kv_events.max_batch_elements': 'must be an integer in [1024, 67108864], got 1099511627776',
      'kv_events.max_kv_groups': 'must be an integer in [1, 32], got 0',
    });
  });

  it('refuses more KV-cache groups than ingestion keeps a bit for (32)', () => {
    expect(load({ max_kv_groups: 32 }).kvEvents.maxKvGroups).toBe(32);
    expect(problems({ max_kv_groups: 33 })).toEqual({
      'kv_events.max_kv_groups': 'must be an integer in [1, 32], got 33',
    });
  });

  it('refuses a replay answer bound below the message bound: a replay could not bring back the largest batch', () => {
    expect(problems({ max_message_bytes: 4 * 2 ** 20, max_replay_bytes: 2 ** 20 })).toEqual({
      'kv_events.max_replay_bytes': expect.stringMatching(
        /^must be at least kv_events\.max_message_bytes \(4194304\), got 1048576: a replay could not bring back/,
      ),
    });
    // The default answer bound (512 MiB) under a raised message bound: refused the same way.
    expect(Object.keys(problems({ max_message_bytes: 1024 * 2 ** 20 }))).toEqual(['kv_events.max_replay_bytes']);
  });

  it('a reload cannot change them (ingestion is built at start)', () => {
    for (const [key, value] of Object.entries({
      pending_batches: 7,
      replay_timeout_ms: 7,
      receive_high_water_mark: 7,
      max_message_bytes: 7 * 2 ** 20,
      max_batch_elements: 7 * 1024,
      max_kv_groups: 7,
    }))
      expect(reloadProblems(load({}), load({ [key]: value })).map((p) => p.path)).toEqual([`kv_events.${key}`]);
    expect(
      reloadProblems(load({}), load({ max_replay_bytes: 7 * 2 ** 20, max_message_bytes: 2 ** 20 })).map((p) => p.path),
    ).toEqual(['kv_events.max_message_bytes', 'kv_events.max_replay_bytes']);
  });
});
