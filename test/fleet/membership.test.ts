/**
 * Workers joining and leaving a running fleet through `FleetMembers` (the path
 * reloads and discovery sources share), against real mocker engines with KV
 * events behind a real ModelRouter, EngineClient and HealthProber.
 *
 * issue 16 (workers come and go safely): a leaving worker takes no new
 * request at once and its index entries, bookings, KV-event subscription and
 * engine pool go; a joining one is routed to once its probe passes; a worker
 * that flaps leaves nothing behind.
 */
import pino from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { FleetMembers } from '../../src/fleet/membership.js';
import { HealthProber } from '../../src/discovery/index.js';
import { drain, prepare, startFleet, type Fleet } from '../helpers/fleet.js';
import { until } from '../helpers/until.js';

/** Worker 2's only rank. */
const W2 = { workerId: 2, dpRank: 0 };

describe('FleetMembers: join and leave', () => {
  let fleet: Fleet | undefined;
  let prober: HealthProber | undefined;
  afterEach(async () => {
    prober?.close();
    await fleet?.close();
  });

  it('a flapping worker leaks no subscription, index entry, booking or engine pool', async () => {
    fleet = await startFleet(2);
    const { router, registry, engine, metrics } = fleet;
    prober = new HealthProber(registry, { checkModels: false });
    const members = new FleetMembers(registry, engine, prober);
    members.watch(router.model, pino({ level: 'silent' }), metrics);
    const w2 = fleet.workers[1]!;
    const tokens = Array.from({ length: 64 }, (_, i) => 7000 + i);
    await until(
      () => router.events!.eventStatus(2) !== undefined && router.events!.subscriber(W2) !== undefined,
      'worker 2 subscribed',
    );
    await drain(await router.route(prepare(tokens, { hints: { annotations: [], backendInstanceId: 2 } })));
    await until(() => router.decode.kvRouter!.index.blockCount(2) > 0, 'worker 2 indexed');

    for (let round = 0; round < 5; round++) {
      members.leave(2);
      // At once: not routable, no subscription, no index entry, no booking, no engine pool.
      expect(router.decode.worker(2)).toBeUndefined();
      expect(router.events!.sources().map((s) => s.workerId)).toEqual([1]);
      expect(router.decode.kvRouter!.workers().map((w) => w.workerId)).toEqual([1]);
      expect(router.decode.kvRouter!.index.findSlot(2)).toBeUndefined();
      expect(engine.hasWorker(w2.url)).toBe(false);
      const r = await router.route(prepare(tokens, { maxTokens: 1 }));
      expect(r.worker.workerId).toBe(1);
      await drain(r);
      members.join(w2, 'static');
      await until(() => registry.isAvailable(2), 'worker 2 routable again');
      expect(
        router
          .events!.sources()
          .map((s) => s.workerId)
          .sort(),
      ).toEqual([1, 2]);
    }
    members.leave(2);
    expect(router.events!.sources()).toHaveLength(1);
    expect(router.decode.kvRouter!.activeRequestCount).toBe(0);
    expect(engine.workers).toEqual([fleet.workers[0]!.url.replace(/\/$/, '')]);
    const text = await metrics.text();
    expect(text).toContain(
      'kvgate_worker_membership_changes_total{model="mock-model",source="static",change="joined"} 5',
    );
    expect(text).toContain(
      'kvgate_worker_membership_changes_total{model="mock-model",source="static",change="left"} 6',
    );
  }, 60_000);

  // Series cardinality: worker ids come and go with the fleet (pods, registrations); a worker that left and
  // drained takes every series labelled with its id along, so churn does not pile up series of gone workers.
  it('a worker that left and drained leaves no series labelled with its id', async () => {
    fleet = await startFleet(2, { mocker: { speedup: 5 } });
    const { router, registry, engine, metrics } = fleet;
    prober = new HealthProber(registry, { checkModels: false });
    const members = new FleetMembers(registry, engine, prober);
    members.watch(router.model, pino({ level: 'silent' }), metrics);
    await until(() => router.events!.subscriber(W2) !== undefined, 'worker 2 subscribed');
    const tokens = Array.from({ length: 64 }, (_, i) => 9000 + i);
    await drain(await router.route(prepare(tokens, { hints: { annotations: [], backendInstanceId: 2 } })));
    router.tick();
    const before = await metrics.text();
    expect(before).toMatch(/kvgate_router_time_to_first_token_seconds_count\{[^}]*worker_id="2"[^}]*\} 1/);
    expect(before).toMatch(/kvgate_worker_up\{[^}]*worker_id="2"/);
    members.leave(2);
    await until(() => members.state(2) === undefined, 'worker 2 drained');
    router.tick();
    const after = await metrics.text();
    expect(after.split('\n').filter((l) => /worker_id="2"/.test(l))).toEqual([]);
    // Worker 1's own series stay.
    expect(after).toMatch(/kvgate_worker_up\{[^}]*worker_id="1"[^}]*\} 1/);
  }, 60_000);

  it('a leaving worker finishes its stream in flight and takes no new request', async () => {
    fleet = await startFleet(2, { mocker: { speedup: 5 } });
    const { router, registry, engine } = fleet;
    prober = new HealthProber(registry, { checkModels: false });
    const members = new FleetMembers(registry, engine, prober);
    const tokens = Array.from({ length: 40 }, (_, i) => 100 + i);
    const inflight = await router.route(
      prepare(tokens, { maxTokens: 40, hints: { annotations: [], backendInstanceId: 2 } }),
    );
    members.leave(2);
    for (let i = 0; i < 3; i++) {
      const r = await router.route(
        prepare(
          tokens.map((t) => t + i * 1000),
          { maxTokens: 1 },
        ),
      );
      expect(r.worker.workerId).toBe(1);
      await drain(r);
    }
    const done = await drain(inflight);
    expect(done.usage?.prompt_tokens).toBe(40);
    expect(done.payloads.at(-1)).toBe('[DONE]');
  }, 60_000);

  // issue 16 (/admin/models states): joining until the first probe passes, ready, draining while
  // its engine pool finishes, then gone; each with its source.
  it("reports each worker's source and state through a join and a leave", async () => {
    fleet = await startFleet(2, { mocker: { speedup: 5 } });
    const { router, registry, engine } = fleet;
    prober = new HealthProber(registry, { checkModels: false });
    const members = new FleetMembers(registry, engine, prober);
    const lines: Record<string, unknown>[] = [];
    members.watch(
      router.model,
      pino({ level: 'info' }, { write: (s: string) => void lines.push(JSON.parse(s)) }),
      fleet.metrics,
    );
    members.started(fleet.workers[0]!);
    expect([members.sourceOf(1), members.state(1)]).toEqual(['static', 'ready']);
    const w2 = fleet.workers[1]!;
    members.leave(2);
    members.join(w2, 'etcd');
    expect([members.sourceOf(2), members.state(2)]).toEqual(['etcd', 'joining']);
    expect(members.discovered(router.model).map((w) => w.id)).toEqual([2]);
    await until(() => members.state(2) === 'ready', 'worker 2 ready');
    const inflight = await router.route(
      prepare(
        Array.from({ length: 40 }, (_, i) => 300 + i),
        { maxTokens: 40, hints: { annotations: [], backendInstanceId: 2 } },
      ),
    );
    members.leave(2);
    expect([members.sourceOf(2), members.state(2)]).toEqual(['etcd', 'draining']);
    expect(members.draining(router.model).map((d) => d.worker.id)).toEqual([2]);
    expect(members.discovered(router.model)).toEqual([]);
    await drain(inflight);
    await until(() => members.state(2) === undefined, 'worker 2 drained');
    expect(members.draining(router.model)).toEqual([]);
    // Each change a line (with the worker's id, URL and source) and a count; the drain's end too.
    expect(lines.filter((l) => l['workerId'] === 2).map((l) => l['change'])).toEqual([
      'left',
      'joined',
      'left',
      'drained',
    ]);
    expect(lines.at(-1)).toMatchObject({ level: 30, url: w2.url, source: 'etcd', msg: /worker 2 drained/ });
    const text = await fleet.metrics.text();
    expect(text).toContain(
      `kvgate_worker_membership_changes_total{model="${router.model}",source="etcd",change="drained"} 1`,
    );
  }, 60_000);
});
