/**
 * The fleet builds its models' routers one after the other, and health probing starts with the first: a later
 * model's worker can be ejected by the first probe round before that model's logger and metrics are registered.
 * Its transitions are still logged (to that model's logger) and counted once the model is built.
 */
import type { Server } from 'node:http';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { loadGatewayConfig } from '../../src/config/index.js';
import { Fleet, type ModelServices } from '../../src/fleet/index.js';
import { KvgateMetrics } from '../../src/metrics/index.js';
import { healthServer } from '../helpers/health-server.js';

const servers: Server[] = [];
const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
  await Promise.all(servers.splice(0).map((s) => new Promise((r) => s.close(r))));
});

describe('health transitions of a model built after the first', () => {
  it("a worker of the second model ejected by the first probe round is logged to its model's logger and counted", async () => {
    const up = await healthServer({ code: 200 }, servers);
    const down = await healthServer({ code: 503 }, servers);
    const dir = mkdtempSync(join(tmpdir(), 'kvgate-health-order-'));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    const file = join(dir, 'kvgate.yaml');
    writeFileSync(
      file,
      [
        // One probe round only (the timer's first round is an hour away): the order of the builds is the whole test.
        'health: { interval_ms: 3600000, unhealthy_after: 1 }',
        'models:',
        '  - name: a',
        '    router_mode: round-robin',
        `    workers: [{ id: 1, url: "${up}" }]`,
        '  - name: b',
        '    router_mode: round-robin',
        '    panic_threshold_percent: 0 # its only worker can be taken out',
        `    workers: [{ id: 2, url: "${down}" }]`,
        '',
      ].join('\n'),
    );
    const config = loadGatewayConfig({ file, env: {} });
    const fleet = new Fleet(config);
    cleanups.push(() => fleet.close());
    const metrics = new KvgateMetrics({ processMetrics: false });
    const lines: Record<string, unknown>[] = [];
    const services = (model: string): ModelServices => ({
      metrics,
      logger: pino({ level: 'info' }, { write: (l: string) => void lines.push(JSON.parse(l)) }).child({ model }),
      tokenizeChat: () => Promise.resolve(new Uint32Array()),
    });
    const [a, b] = config.models;
    const routerA = await fleet.createRouter(a!, services('a'));
    cleanups.push(() => routerA.close());
    // The first probe round has run: worker 2 is out before model b's router exists.
    expect(fleet.registry.isAvailable(2)).toBe(false);
    const routerB = await fleet.createRouter(b!, services('b'));
    cleanups.push(() => routerB.close());
    const transitions = lines.filter((l) => l['transition'] !== undefined);
    expect(transitions).toEqual([
      expect.objectContaining({
        model: 'b',
        workerId: 2,
        url: down,
        transition: 'ejected',
        level: 40, // warn
        early: true,
      }),
    ]);
    const text = await metrics.text();
    expect(text).toContain('kvgate_worker_health_transitions_total{model="b",worker_id="2",transition="ejected"} 1');
    expect(text).toContain('kvgate_worker_ejections_total{model="b",worker_id="2",reason="health_probe"} 1');
  });
});
