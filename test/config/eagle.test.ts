/** A model's `eagle` (Eagle block hashing, Dynamo's `is_eagle`): off by default, a boolean, and restart-only. */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { loadGatewayConfig, reloadProblems } from '../../src/config/index.js';
import { kvgateErrorOf } from '../helpers/kvgate-error.js';

const dir = mkdtempSync(join(tmpdir(), 'kvgate-eagle-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function load(lines: readonly string[]): ReturnType<typeof loadGatewayConfig> {
  const file = join(dir, 'kvgate.yaml');
  const model = ['models:', '  - name: m', '    workers: [{ id: 1, url: "http://127.0.0.1:9001" }]'];
  writeFileSync(
    file,
    [...model, '    router: { use_kv_events: false }', ...lines.map((l) => `    ${l}`), ''].join('\n'),
  );
  return loadGatewayConfig({ file, env: {} });
}

describe('eagle', () => {
  it('is off by default and read per model', () => {
    expect(load([]).models[0]!.eagle).toBe(false);
    expect(load(['eagle: true']).models[0]!.eagle).toBe(true);
  });

  it('must be a boolean, and a reload cannot change it', () => {
    const problems = kvgateErrorOf(() => load(['eagle: sometimes'])).detail!.problems as { path: string }[];
    expect(problems.map((p) => p.path)).toEqual(['models[0].eagle']);
    expect(reloadProblems(load([]), load(['eagle: true'])).map((p) => p.path)).toEqual(['models[0].eagle']);
  });
});
