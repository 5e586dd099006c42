/**
 * ConfigReloader over fake targets: every reload is logged and counted by outcome, a reload that fails while it
 * is applied (not a rejected file) included.
 */
import { describe, expect, it } from 'vitest';
import { ConfigReloader } from '../../src/cli/reload.js';
import { pino } from 'pino';
import { loadGatewayConfig, type GatewayConfig } from '../../src/config/index.js';
import type { FleetMembers } from '../../src/fleet/index.js';

const config = (threshold: number): GatewayConfig =>
  loadGatewayConfig({
    env: {},
    base: {
      models: [
        {
          name: 'm',
          router_mode: 'kv',
          router: { router_temperature: threshold, use_kv_events: false },
          workers: [{ id: 1, url: 'http://10.0.0.1:8000' }],
        },
      ],
    },
  });

function setup(next: () => GatewayConfig, reconfigureRouter: () => void) {
  const counts: Record<string, number> = {};
  const lines: Record<string, unknown>[] = [];
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
  const reloader = new ConfigReloader(config(0), {
    load: next,
    server: { reconfigure: () => undefined },
    members: { leave: () => undefined, join: () => undefined } as unknown as FleetMembers,
    reconfigureRouter,
    logger,
    metrics: {
      configReloads: {
        labels: (l) => ({
          inc: () => void (counts[`${l.trigger}/${l.outcome}`] = (counts[`${l.trigger}/${l.outcome}`] ?? 0) + 1),
        }),
      },
    },
  });
  return { reloader, counts, lines };
}

describe('ConfigReloader: each reload is logged and counted', () => {
  it('applied, then unchanged', async () => {
    const { reloader, counts, lines } = setup(
      () => config(0.5),
      () => undefined,
    );
    expect((await reloader.reload('admin')).changes.map((c) => c.path)).toEqual([
      'models[0].router.router_temperature',
    ]);
    await reloader.reload('sighup');
    expect(counts).toEqual({ 'admin/applied': 1, 'sighup/unchanged': 1 });
    expect(lines.map((l) => l['level'])).toEqual(['info', 'info']);
  });

  it('a reload that fails while it is applied is an error line and a failed count; the next one tries again', async () => {
    let fail = true;
    const { reloader, counts, lines } = setup(
      () => config(0.5),
      () => {
        if (fail) throw new Error('router refused the knobs');
      },
    );
    await expect(reloader.reload('sighup')).rejects.toThrow(/router refused the knobs/);
    expect(counts).toEqual({ 'sighup/failed': 1 });
    expect(lines).toMatchObject([
      { level: 'error', trigger: 'sighup', msg: /configuration reload failed: router refused/ },
    ]);
    expect(reloader.current.models[0]!.router).toEqual(config(0).models[0]!.router);
    fail = false;
    await reloader.reload('admin');
    expect(counts).toEqual({ 'sighup/failed': 1, 'admin/applied': 1 });
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
