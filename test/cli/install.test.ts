/**
 * What the README says a new operator types to get the `kvgate` command and the library: in a clone, `npx kvgate`;
 * in another project, the tarball `npm pack` makes, installed. Real commands over the compiled dist/: npx in the
 * clone, and `npm pack`'s tarball unpacked where npm installs a package, its runtime dependencies beside it.
 */
import { execFile } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { ROOT } from './process.js';

const run = promisify(execFile);
const PKG = JSON.parse(readFileSync(`${ROOT}package.json`, 'utf8')) as {
  version: string;
  dependencies: Record<string, string>;
};
const dirs: string[] = [];
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

describe('installing kvgate as the README says', () => {
  it('in a clone, `npx kvgate` is the command', async () => {
    const { stdout } = await run('npx', ['--no', '--', 'kvgate', '--version'], { cwd: ROOT });
    expect(stdout).toBe(`kvgate ${PKG.version}\n`);
  }, 60_000);

  it('the tarball of `npm pack` gives the kvgate command and the library, both entry points', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'kvgate-pack-'));
    dirs.push(dir);
    // dist/ and build/ are built already (npm pack in a clone builds them first, through the prepare script).
    const { stdout } = await run('npm', ['pack', '--ignore-scripts', '--json', '--pack-destination', dir], {
      cwd: ROOT,
    });
    const { filename } = (JSON.parse(stdout) as { filename: string }[])[0]!;
    const app = join(dir, 'app');
    const installed = join(app, 'node_modules', 'kvgate');
    mkdirSync(installed, { recursive: true });
    await run('tar', ['-xzf', join(dir, filename), '-C', installed, '--strip-components=1']);
    for (const dep of Object.keys(PKG.dependencies)) {
      mkdirSync(join(app, 'node_modules', dep, '..'), { recursive: true });
      symlinkSync(join(ROOT, 'node_modules', dep), join(app, 'node_modules', dep));
    }
    const version = await run(process.execPath, [join(installed, 'bin/kvgate.js'), '--version'], { cwd: app });
    expect(version.stdout).toBe(`kvgate ${PKG.version}\n`);
    const probe =
      "const lib = await import('kvgate'); const gw = await import('kvgate/gateway'); " +
      'console.log(typeof lib.KvRouter, Object.keys(gw).length > 0);';
    const lib = await run(process.execPath, ['--input-type=module', '-e', probe], { cwd: app });
    expect(lib.stdout).toBe('function true\n');
  }, 120_000);
});
