/**
 * `EtcdWorkersSource` against a REAL etcd (Debian's etcd-server, started here on OS-chosen ports): a key whose id
 * segment is not canonical (`07`, the same number as `7`) is refused, logged once with its key and counted, and
 * never touches the worker registered as `7`, whose puts and deletes are its own. And against a gRPC PROTOCOL
 * DOUBLE of etcd (test/helpers/etcd-watch-double.ts) that confirms each watch and ends it at once: the source lists
 * and watches again on a growing back-off, in virtual time, not every 0.5 s for ever.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Etcd3 } from 'etcd3';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/common/index.js';
import { loadGatewayConfig, type ModelConfig } from '../../src/config/index.js';
import { HealthProber, WorkerRegistry } from '../../src/discovery/index.js';
import { EngineClient } from '../../src/engines/index.js';
import { EtcdWorkersSource } from '../../src/fleet/etcd-source.js';
import { FleetMembers } from '../../src/fleet/membership.js';
import { KvgateMetrics } from '../../src/metrics/index.js';
import { startEtcdServer, type EtcdServer } from '../helpers/etcd-server.js';
import { EtcdWatchDouble } from '../helpers/etcd-watch-double.js';
import { StepTimers } from '../helpers/step-timers.js';
import { until } from '../helpers/until.js';

const PREFIX = '/kvgate/workers/m/';
const value = (host: string): string => JSON.stringify({ url: `http://${host}:8000` });

describe('EtcdWorkersSource against a real etcd', () => {
  let etcd: EtcdServer;
  let client: Etcd3;
  let dir: string;
  beforeAll(async () => {
    etcd = await startEtcdServer();
    client = new Etcd3({ hosts: etcd.url });
    dir = mkdtempSync(join(tmpdir(), 'kvgate-etcd-source-'));
  }, 30_000);
  afterAll(async () => {
    client?.close();
    await etcd?.stop();
    if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
  });

  it('refuses a key 07 beside 7: logged once with its key, counted, worker 7 served from key 7 alone', async () => {
    const file = join(dir, 'kvgate.yaml');
    writeFileSync(
      file,
      `models:\n  - name: m\n    router_mode: round-robin\n    etcd: { endpoints: ["${etcd.url}"] }\n`,
    );
    const model: ModelConfig = loadGatewayConfig({ file, env: {} }).models[0]!;
    const registry = new WorkerRegistry();
    const engine = new EngineClient({ connectTimeoutMs: 200 });
    const prober = new HealthProber(registry, { checkModels: false });
    const members = new FleetMembers(registry, engine, prober);
    const metrics = new KvgateMetrics({ processMetrics: false });
    const source = new EtcdWorkersSource(model, registry, members, () => 0.5);
    const lines: Record<string, unknown>[] = [];
    try {
      await client.put(`${PREFIX}7`).value(value('10.0.0.7'));
      // Listed: the key 07 is in the first listing.
      await client.put(`${PREFIX}07`).value(value('10.0.0.70'));
      source.start(pino({ level: 'info' }, { write: (l: string) => void lines.push(JSON.parse(l)) }), metrics);
      const urls = (): string[] => registry.all().map((w) => `${w.id} ${w.url}`);
      await until(() => urls().length === 1, 'listed');
      expect(urls()).toEqual(['7 http://10.0.0.7:8000']);
      await until(() => lines.some((l) => l['msg'] === 'etcd workers applied: 1 joined, 0 left'), 'applied');

      // Watched: a put of 07, and a put of another non-canonical key, do not replace worker 7.
      await client.put(`${PREFIX}07`).value(value('10.0.0.71'));
      await client.put(`${PREFIX}+8`).value(value('10.0.0.8'));
      // A put of key 7 that arrives after both: the watch has delivered them.
      await client.put(`${PREFIX}7`).value(value('10.0.0.77'));
      await until(() => urls().join() === '7 http://10.0.0.77:8000', 'worker 7 changed by its own key');
      // A delete of 07 leaves worker 7 alone.
      await client.delete().key(`${PREFIX}07`);
      await client.put(`${PREFIX}9`).value(value('10.0.0.9'));
      await until(() => urls().length === 2, 'worker 9 joined');
      expect(urls()).toEqual(['7 http://10.0.0.77:8000', '9 http://10.0.0.9:8000']);

      const refused = lines.filter((l) => String(l['msg']).startsWith('etcd registration rejected'));
      expect(refused).toEqual([
        expect.objectContaining({ level: 50, key: `${PREFIX}07` }),
        expect.objectContaining({ level: 50, key: `${PREFIX}+8` }),
      ]);
      expect(String(refused[0]!['msg'])).toMatch(/canonical decimal.*"07"/);
      expect(await metrics.text()).toContain(
        'kvgate_discovery_updates_total{model="m",source="etcd",outcome="rejected"} 2',
      );
    } finally {
      await source.close();
      prober.close();
      await engine.close();
    }
  }, 30_000);
});

describe('EtcdWorkersSource against an etcd double that ends each watch at once', () => {
  it('lists and watches again on a growing back-off, logged and counted as a lost watch', async () => {
    const double = await EtcdWatchDouble.start();
    const dir = mkdtempSync(join(tmpdir(), 'kvgate-etcd-double-'));
    const file = join(dir, 'kvgate.yaml');
    writeFileSync(
      file,
      `models:\n  - name: m\n    router_mode: round-robin\n    etcd: { endpoints: ["${double.url}"] }\n`,
    );
    const model: ModelConfig = loadGatewayConfig({ file, env: {} }).models[0]!;
    const registry = new WorkerRegistry();
    const engine = new EngineClient({ connectTimeoutMs: 200 });
    const prober = new HealthProber(registry, { checkModels: false });
    const metrics = new KvgateMetrics({ processMetrics: false });
    const scheduler = new StepTimers();
    // The clock never moves (no watch stays open a while); rng 1: each delay is the back-off's full step.
    const source = new EtcdWorkersSource(model, registry, new FleetMembers(registry, engine, prober), () => 1, {
      clock: new ManualClock(),
      scheduler,
    });
    const lines: Record<string, unknown>[] = [];
    try {
      source.start(pino({ level: 'info' }, { write: (l: string) => void lines.push(JSON.parse(l)) }), metrics);
      const lost = (): number =>
        lines.filter((l) => / lost; the current workers stay until it is back$/.test(String(l['msg']))).length;
      const delays: number[] = [];
      for (let n = 1; n <= 6; n++) {
        // Lost: the watch's opening timer is cleared, the one timer left is the retry.
        await until(() => lost() === n && scheduler.pending.length === 1, `watch ${n} lost and the retry scheduled`);
        // Nothing lists or watches again until the retry's timer fires.
        expect([double.ranges, double.watches]).toEqual([n, n]);
        const t = scheduler.pending.pop()!;
        delays.push(t.ms);
        if (n < 6) t.fn();
      }
      expect(delays).toEqual([500, 1000, 2000, 4000, 5000, 5000]);
      const text = await metrics.text();
      expect(text).toContain('kvgate_discovery_watch_transitions_total{model="m",source="etcd",transition="lost"} 6');
      expect(text).toContain(
        'kvgate_discovery_watch_transitions_total{model="m",source="etcd",transition="resumed"} 5',
      );
      expect(
        lines.filter((l) => / lost; the current workers stay until it is back$/.test(String(l['msg']))),
      ).toHaveLength(6);
    } finally {
      await source.close();
      prober.close();
      await engine.close();
      double.close();
      rmSync(dir, { recursive: true, force: true });
    }
  }, 30_000);
});
