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
) {
  const counts: Record<string, number> = {};
  const lines: Record<string, unknown>[] = [];
  const calls: Calls = [];
  const registered = new Set([1]);
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
      registered.delete(id);
      leave(id);
    },
    join: (w: { id: number }) => {
      calls.push(`join ${w.id}`);
      registered.add(w.id);
    },
  };
  const reloader = new ConfigReloader(config(0), {
    load: next,
    server: { reconfigure: (c) => void calls.push(`server ${c.limits.maxMessages}`) },
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

  it('a leave that throws rolls back the workers that left, the router and the server, newest first', async () => {
    const { reloader, calls, registered } = setup(
      () => config(0.5, [2]),
      () => undefined,
      () => {
        throw new Error('a listener refused');
      },
    );
    await expect(reloader.reload('admin')).rejects.toMatchObject({
      code: 'KVG_ERR_RELOAD_FAILED',
      detail: { stage: 'models[0].workers', rolledBack: true },
    });
    expect(calls).toEqual(['server 105', 'router 0.5', 'leave 1', 'join 1', 'router 0', 'server 100']);
    expect([...registered]).toEqual([1]);
  });

  it('a rollback that fails too is said so: an error line per stage, and the error says the gateway may run a mix', async () => {
    const { reloader, counts, lines, calls } = setup(
      () => config(0.5, [2]),
      (m) => {
        if (m.router.routerTemperature === 0) throw new Error('router refused the old knobs');
      },
      () => {
        throw new Error('a listener refused');
      },
    );
    await expect(reloader.reload('admin')).rejects.toMatchObject({
      code: 'KVG_ERR_RELOAD_FAILED',
      detail: { stage: 'models[0].workers', rolledBack: false },
      message: expect.stringMatching(/rolling it back failed too: the gateway may run a mix/),
    });
    // Every stage is still undone after one undo failed.
    expect(calls).toEqual(['server 105', 'router 0.5', 'leave 1', 'join 1', 'router 0', 'server 100']);
    expect(counts).toEqual({ 'admin/failed': 1 });
    expect(lines).toMatchObject([
      { level: 'error', stage: 'models[0].router', msg: /rolling back models\[0\]\.router failed: router refused/ },
      { level: 'error', msg: /configuration reload failed while applying models\[0\]\.workers: a listener refused/ },
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
