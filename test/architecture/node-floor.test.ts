/**
 * The Node.js versions the README promises are the ones the locked
 * dependencies accept: every package kvgate runs with (not dev-only) accepts
 * package.json's `engines.node` floor, and every package of the build and the
 * tests accepts the README's floor for building and testing. A dependency
 * upgrade that silently raises the floor fails here.
 */
import { readFileSync } from 'node:fs';
import semver from 'semver';
import { describe, expect, it } from 'vitest';

const root = new URL('../../', import.meta.url);
const pkg = JSON.parse(readFileSync(new URL('package.json', root), 'utf8')) as { engines: { node: string } };
const lock = JSON.parse(readFileSync(new URL('package-lock.json', root), 'utf8')) as {
  packages: Record<string, { dev?: boolean; optional?: boolean; os?: string[]; engines?: { node?: string } }>;
};
const readme = readFileSync(new URL('README.md', root), 'utf8');

/** Locked packages (this platform's: other platforms' native builds are not installed) whose engines reject `version`. */
function rejecting(version: string, which: (dev: boolean) => boolean): string[] {
  return Object.entries(lock.packages)
    .filter(([name, p]) => name !== '' && which(p.dev === true) && (p.os === undefined || p.os.includes('linux')))
    .filter(([name]) => !/-(darwin|win32|android|freebsd|openharmony|wasm32|arm|ppc64|riscv64|s390x|musl)/.test(name))
    .filter(([, p]) => p.engines?.node !== undefined && !semver.satisfies(version, p.engines.node))
    .map(([name, p]) => `${name.replace(/^node_modules\//, '')} wants ${p.engines!.node}`);
}

describe('the Node.js floor', () => {
  const runFloor = semver.minVersion(pkg.engines.node)!.version;
  const testFloor =
    /Node\.js >= (\d+\.\d+(?:\.\d+)?) to run kvgate[^;]*; >= (\d+\.\d+(?:\.\d+)?) to build and test/.exec(readme);

  it('the README states the floors, the first being package.json engines.node', () => {
    expect(testFloor, "README: 'Node.js >= A to run kvgate ...; >= B to build and test'").not.toBeNull();
    expect(semver.coerce(testFloor![1])!.version).toBe(runFloor);
  });

  it('every runtime dependency accepts the floor to run', () => {
    expect(rejecting(runFloor, (dev) => !dev)).toEqual([]);
  });

  it('every build and test dependency accepts the floor to build and test', () => {
    expect(rejecting(semver.coerce(testFloor![2])!.version, () => true)).toEqual([]);
  });
});
