/**
 * ConfigReloader over fake targets: every reload is logged and counted by outcome, a reload that fails while it
 * is applied (not a rejected file) included, and such a reload is rolled back whole.
 */
import { describe, expect, it } from 'vitest';
import { ConfigReloader } from '../../src/cli/reload.js';
import { pino } from 'pino';
import { loadGatewayConfig, type GatewayConfig, type ModelConfig } from '../../src/config/index.js';
import type { FleetMembers } from '../../src/fleet/index.js';

const config = (threshold: number, workers: readonly number[] = [1]): GatewayConfig =>
  loadGatewayConfig({
    env: {},
    base: {
      limits: { max_messages: 100 + threshold * 10 },
      models: [
        {
          name: 'm',
          router_mode: 'kv',
          router: { router_temperature: threshold, use_kv_events: false },
          workers: workers.map((id) => ({ id, url: `http://10.0.0.${id}:8000` })),
        },
      ],
    },
  });

/** What the fake targets were told, in order: `server <max_messages>`, `router <temperature>`, `leave <id>`, `join <id>`. */
type Calls = string[];

function setup(
  next: () => GatewayConfig,
  reconfigureRouter: (m: ModelConfig) => void,
  leave: (id: number) => void = () => undefined,
  o: { initial?: readonly number[]; server?: (c: GatewayConfig) => void } = {},
) {
  const counts: Record<string, number> = {};
  const lines: Record<string, unknown>[] = [];
  const calls: Calls = [];
  const initial = o.initial ?? [1];
  const registered = new Set(initial);
  const names: Record<number, string> = { 30: 'info', 40: 'warn', 50: 'error' };
  const logger = pino(
    { level: 'info' },
    {
      write: (s: string) => {
        const l = JSON.parse(s) as Record<string, unknown>;
        lines.push({ ...l, level: names[l['level'] as number] });
      },
    },
  );
  const members = {
    state: (id: number) => (registered.has(id) ? 'ready' : undefined),
    leave: (id: number) => {
      calls.push(`leave ${id}`);
      leave(id);
      registered.delete(id);
    },
    join: (w: { id: number }) => {
      calls.push(`join ${w.id}`);
      registered.add(w.id);
    },
  };
  const reloader = new ConfigReloader(config(0, initial), {
    load: next,
    server: {
      reconfigure: (c) => {
        calls.push(`server ${c.limits.maxMessages}`);
        o.server?.(c);
      },
    },
    members: members as unknown as FleetMembers,
    reconfigureRouter: (m) => {
      calls.push(`router ${m.router.routerTemperature}`);
      reconfigureRouter(m);
    },
    logger,
    metrics: {
      configReloads: {
        labels: (l) => ({
          inc: () => void (counts[`${l.trigger}/${l.outcome}`] = (counts[`${l.trigger}/${l.outcome}`] ?? 0) + 1),
        }),
      },
    },
  });
  return { reloader, counts, lines, calls, registered };
}

describe('ConfigReloader: each reload is logged and counted', () => {
  it('applied, then unchanged', async () => {
    const { reloader, counts, lines } = setup(
      () => config(0.5),
      () => undefined,
    );
    expect((await reloader.reload('admin')).changes.map((c) => c.path)).toEqual([
      'limits.max_messages',
      'models[0].router.router_temperature',
    ]);
    await reloader.reload('sighup');
    expect(counts).toEqual({ 'admin/applied': 1, 'sighup/unchanged': 1 });
    expect(lines.map((l) => l['level'])).toEqual(['info', 'info']);
  });

  it('a reload that fails while it is applied is rolled back, an error line and a failed count; the next one applies', async () => {
    let fail = true;
    const { reloader, counts, lines, calls } = setup(
      () => config(0.5),
      (m) => {
        if (fail && m.router.routerTemperature === 0.5) throw new Error('router refused the knobs');
      },
    );
    await expect(reloader.reload('sighup')).rejects.toMatchObject({
      code: 'KVG_ERR_RELOAD_FAILED',
      detail: { stage: 'models[0].router', rolledBack: true },
      message: expect.stringMatching(/models\[0\]\.router: router refused the knobs; what was applied is rolled back/),
    });
    // The server took the new limits, then the old ones back; the router that refused is left as it was.
    expect(calls).toEqual(['server 105', 'router 0.5', 'server 100']);
    expect(counts).toEqual({ 'sighup/failed': 1 });
    expect(lines).toMatchObject([
      { level: 'error', trigger: 'sighup', stage: 'models[0].router', msg: /configuration reload failed while/ },
    ]);
    expect(reloader.current.models[0]!.router).toEqual(config(0).models[0]!.router);
    fail = false;
    calls.length = 0;
    await reloader.reload('admin');
    expect(calls).toEqual(['server 105', 'router 0.5']);
    expect(counts).toEqual({ 'sighup/failed': 1, 'admin/applied': 1 });
  });

  it('a leave that throws rolls nothing back: the other workers leave, the worker still there is named and kept', async () => {
    // Worker 1's leave throws before it is removed; worker 2's throws after (it left); worker 3 joins.
    let refuse = true;
    const { reloader, calls, counts, lines, registered } = setup(
      () => config(0.5, [3]),
      () => undefined,
      (id) => {
        if (!refuse) return;
        if (id === 2) registered.delete(2);
        throw new Error(`a listener refused worker ${id}`);
      },
      { initial: [1, 2] },
    );
    const outcome = await reloader.reload('admin');
    expect(outcome.notLeft).toEqual([{ workerId: 1, model: 'm', reason: 'a listener refused worker 1' }]);
    expect(outcome.notJoined).toEqual([]);
    // Nothing undone, nothing put back: the reload commits at its first leave. The server takes the config as it runs.
    expect(calls).toEqual(['server 105', 'router 0.5', 'leave 1', 'leave 2', 'join 3', 'server 105']);
    expect([...registered].sort()).toEqual([1, 3]);
    expect(reloader.current.models[0]!.workers.map((w) => w.id)).toEqual([3, 1]);
    expect(counts).toEqual({ 'admin/partial': 1 });
    expect(lines).toMatchObject([
      { level: 'error', workerId: 1, msg: /worker 1 leaving threw: a listener refused worker 1 \(it stays/ },
      { level: 'error', workerId: 2, msg: /worker 2 leaving threw: a listener refused worker 2 \(it left\)/ },
      {
        level: 'warn',
        notLeft: [{ workerId: 1 }],
        msg: /worker\(s\) 1 could not leave \(the next reload tries again\)/,
      },
    ]);
    // The same file again: worker 1 leaves now, nothing else changes.
    refuse = false;
    calls.length = 0;
    const again = await reloader.reload('admin');
    expect(calls).toEqual(['server 105', 'leave 1']);
    expect(again).toMatchObject({ notLeft: [], notJoined: [] });
    expect(reloader.current.models[0]!.workers.map((w) => w.id)).toEqual([3]);
  });

  it('a rollback that fails too is said so: an error line per stage, and the error says the gateway may run a mix', async () => {
    const { reloader, counts, lines, calls } = setup(
      () => config(0.5),
      (m) => {
        if (m.router.routerTemperature === 0.5) throw new Error('router refused the knobs');
      },
      () => undefined,
      {
        server: (c) => {
          if (c.limits.maxMessages === 100) throw new Error('server refused the old settings');
        },
      },
    );
    await expect(reloader.reload('admin')).rejects.toMatchObject({
      code: 'KVG_ERR_RELOAD_FAILED',
      detail: { stage: 'models[0].router', rolledBack: false },
      message: expect.stringMatching(/rolling it back failed too: the gateway may run a mix/),
    });
    expect(calls).toEqual(['server 105', 'router 0.5', 'server 100']);
    expect(counts).toEqual({ 'admin/failed': 1 });
    expect(lines).toMatchObject([
      { level: 'error', stage: 'server', msg: /rolling back server failed: server refused the old settings/ },
      { level: 'error', msg: /configuration reload failed while applying models\[0\]\.router: router refused/ },
    ]);
  });

  it('a file that cannot be read is rejected (counted as such, not as failed)', async () => {
    const { reloader, counts, lines } = setup(
      () => loadGatewayConfig({ file: '/nonexistent/kvgate.yaml', env: {} }),
      () => undefined,
    );
    await expect(reloader.reload('admin')).rejects.toMatchObject({ code: 'KVG_ERR_RELOAD_REJECTED' });
    expect(counts).toEqual({ 'admin/rejected': 1 });
    expect(lines).toMatchObject([{ level: 'error', msg: /configuration reload rejected/ }]);
  });
});
