/**
 * A model's `workers_file` (issue 16, discovery: a watched file): validated as
 * the config is, every problem with its field path and line; ids unique in the
 * file and unused by the rest of the gateway; the model's rules over static and
 * file workers together.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { loadGatewayConfig, loadWorkersFile } from '../../src/config/index.js';
import { KvgateError } from '../../src/errors/index.js';

const dir = mkdtempSync(join(tmpdir(), 'kvgate-workers-file-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function model(workersText: string, extra = ''): ReturnType<typeof loadGatewayConfig>['models'][number] {
  writeFileSync(join(dir, 'workers.yaml'), workersText);
  const file = join(dir, 'kvgate.yaml');
  writeFileSync(file, `models:\n  - name: m\n    router_mode: round-robin\n    workers_file: workers.yaml\n${extra}`);
  return loadGatewayConfig({ file, env: {} }).models[0]!;
}

const problemsOf = (f: () => unknown): string[] => {
  try {
    f();
  } catch (err) {
    expect(err).toBeInstanceOf(KvgateError);
    return ((err as KvgateError).detail!.problems as { path: string; reason: string; position?: string }[]).map(
      (p) => `${p.path}@${p.position}: ${p.reason}`,
    );
  }
  throw new Error('no problem reported');
};

describe('workers_file', () => {
  it('lets a model list no static worker and resolves the path against the config file', () => {
    const m = model('workers: []\n');
    expect(m.workers).toEqual([]);
    expect(m.workersFile).toBe(join(dir, 'workers.yaml'));
    expect(loadWorkersFile(m, new Map(), 'x')).toEqual([]);
  });

  it('reads workers as the config does (model name, dialect, defaults)', () => {
    const m = model('workers:\n  - { id: 7, url: "http://10.0.0.7:8000/" }\n', '    engine: sglang\n');
    expect(loadWorkersFile(m, new Map(), 'x')).toEqual([
      expect.objectContaining({
        id: 7,
        model: 'm',
        url: 'http://10.0.0.7:8000',
        dialect: 'sglang',
        role: 'aggregated',
        dpSize: 1,
      }),
    ]);
  });

  it('names every problem with its field and line; ids used elsewhere are refused', () => {
    const m = model(
      'workers:\n  - { id: 1, url: nope }\n  - { id: 2, url: "http://h:1", colur: red }\n  - { id: 2, url: "http://h:2" }\n  - { id: 9, url: "http://h:3" }\nextra: 1\n',
    );
    const problems = problemsOf(() =>
      loadWorkersFile(m, new Map([[9, 'worker 9 of model other (static)']]), 'the previous workers stay'),
    );
    expect(problems).toEqual([
      'extra@6:1: unknown field; expected one of: workers',
      'workers[0].url@2:14: must be an absolute http(s) URL, got "nope"',
      'workers[1].colur@3:33: unknown field; expected one of: id, url, role, engine, dp_size, dp_start, kv_events, bootstrap_host, bootstrap_port, max_num_batched_tokens, total_kv_blocks, serves_aggregated, return_token_ids, taints',
      'workers[2].id@4:7: 2 is already the id of workers[1]; worker ids are unique across the gateway',
      'workers[3].id@5:7: 9 is already the id of worker 9 of model other (static); worker ids are unique across the gateway',
    ]);
  });

  it("applies the model's rules over static and file workers together", () => {
    const m = model(
      'workers:\n  - { id: 3, url: "http://h:3", role: decode }\n',
      '    workers: [{ id: 1, url: "http://h:1" }]\n',
    );
    expect(problemsOf(() => loadWorkersFile(m, new Map(), 'x'))[0]).toMatch(
      /^workers@.*mixes aggregated workers with prefill\/decode workers/,
    );
  });

  it('a missing file or a file without workers is a problem, not an empty fleet', () => {
    const m = model('{}\n');
    expect(problemsOf(() => loadWorkersFile(m, new Map(), 'x'))).toEqual([
      'workers@1:1: is required (an empty list removes every worker of the file)',
    ]);
    rmSync(join(dir, 'workers.yaml'));
    expect(problemsOf(() => loadWorkersFile(m, new Map(), 'x'))[0]).toMatch(/cannot read config: file not found/);
  });
});
