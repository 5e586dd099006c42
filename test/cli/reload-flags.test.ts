/**
 * A reload reads the file with the command's flags on top, so an edit to a field a flag sets cannot take effect.
 * Before, such a reload answered "reloaded" with no change (or listed the file's other changes only) and the edit was
 * passed over in silence; now each such field is named with its flag, on a warn line and in the outcome, once per edit.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { ConfigReloader } from '../../src/cli/reload.js';
import { loadGatewayConfig, parseServeFlags, type FlaggedField } from '../../src/config/index.js';
import type { FleetMembers } from '../../src/fleet/index.js';

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

const fileText = (temperature: number, maxMessages: number): string =>
  [
    `limits: { max_messages: ${maxMessages} }`,
    'models:',
    '  - name: m',
    '    router_mode: kv',
    `    router: { router_temperature: ${temperature}, use_kv_events: false }`,
    '    workers: [{ id: 1, url: "http://10.0.0.1:8000" }]',
    '',
  ].join('\n');

function setup(argv: readonly string[]) {
  const dir = mkdtempSync(join(tmpdir(), 'kvgate-reload-flags-'));
  dirs.push(dir);
  const file = join(dir, 'kvgate.yaml');
  writeFileSync(file, fileText(0, 100));
  const flags = parseServeFlags(['-c', file, ...argv]);
  const read = { file: flags.configFile, overrides: flags.overrides, env: {} };
  let flagged: readonly FlaggedField[] = [];
  const config = loadGatewayConfig({ ...read, onFlagged: (f) => (flagged = f) });
  const lines: Record<string, unknown>[] = [];
  const logger = pino({ level: 'info' }, { write: (s: string) => void lines.push(JSON.parse(s)) });
  const reloader = new ConfigReloader(config, {
    load: (onFlagged) => loadGatewayConfig({ ...read, onFlagged }),
    flaggedAtStart: flagged,
    server: { reconfigure: () => undefined },
    members: {} as FleetMembers,
    reconfigureRouter: () => undefined,
    logger,
    metrics: { configReloads: { labels: () => ({ inc: () => undefined }) } },
  });
  return { file, reloader, lines };
}

describe('a reload names the file edits a command-line flag hides', () => {
  it('names the field and its flag, keeps the flag value, applies the rest, and names each edit once', async () => {
    const { file, reloader, lines } = setup(['--router-temperature', '0.5']);
    expect(reloader.current.models[0]!.router.routerTemperature).toBe(0.5);

    writeFileSync(file, fileText(0.9, 100));
    const hidden = await reloader.reload('admin');
    expect(hidden.changes).toEqual([]);
    const named = [{ path: 'models[0].router.router_temperature', flag: '--router-temperature' }];
    expect(hidden.hiddenByFlags).toEqual(named);
    expect(lines.at(-2)).toMatchObject({
      level: 40,
      hiddenByFlags: named,
      msg: expect.stringMatching(
        /file changes models\[0\]\.router\.router_temperature \(set by --router-temperature\)/,
      ),
    });
    expect(reloader.current.models[0]!.router.routerTemperature).toBe(0.5);

    writeFileSync(file, fileText(0.9, 120));
    const applied = await reloader.reload('sighup');
    expect(applied.changes.map((c) => c.path)).toEqual(['limits.max_messages']);
    expect(applied.hiddenByFlags).toBeUndefined();
  });

  it('names nothing when the edited field is not set by a flag', async () => {
    const { file, reloader, lines } = setup(['--max-concurrent-requests', '32']);
    writeFileSync(file, fileText(0.9, 100));
    const outcome = await reloader.reload('admin');
    expect(outcome.changes.map((c) => c.path)).toEqual(['models[0].router.router_temperature']);
    expect(outcome.hiddenByFlags).toBeUndefined();
    expect(lines.map((l) => l['level'])).toEqual([30]);
  });
});
