/**
 * A model's `etcd` section and the registration values workers put there
 * (issue 16, discovery: etcd): the section validated with field-named errors;
 * a value validated as a config worker is, refused whole on any problem; the
 * worker id is the key's last segment and must be free.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { loadGatewayConfig, parseEtcdWorkerId, readEtcdWorker } from '../../src/config/index.js';
import { parseRegisterArgs } from '../../src/cli/register.js';
import { KvgateError } from '../../src/errors/index.js';

const dir = mkdtempSync(join(tmpdir(), 'kvgate-etcd-config-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function load(modelYaml: string): ReturnType<typeof loadGatewayConfig> {
  const file = join(dir, 'kvgate.yaml');
  writeFileSync(file, `models:\n  - name: org/m\n${modelYaml}`);
  return loadGatewayConfig({ file, env: {} });
}

const problemsOf = (f: () => unknown): string[] => {
  try {
    f();
  } catch (err) {
    expect(err).toBeInstanceOf(KvgateError);
    return ((err as KvgateError).detail!.problems as { path: string; reason: string }[]).map(
      (p) => `${p.path}: ${p.reason}`,
    );
  }
  throw new Error('no problem reported');
};

describe('etcd discovery config', () => {
  it('reads endpoints and the prefix (default /kvgate/workers); a model with etcd may list no static worker', () => {
    const m = load('    etcd: { endpoints: ["http://127.0.0.1:2379/"] }\n').models[0]!;
    expect(m.etcd).toEqual({ endpoints: ['http://127.0.0.1:2379'], prefix: '/kvgate/workers' });
    expect(m.workers).toEqual([]);
    expect(load('    etcd: { endpoints: ["http://e:2379"], prefix: /a/b/ }\n').models[0]!.etcd!.prefix).toBe('/a/b');
  });

  it('names every field of an invalid section', () => {
    const problems = problemsOf(() => load('    etcd: { endpoints: ["etcd:2379", 5], prefix: "no-slash", ttl: 3 }\n'));
    expect(problems).toEqual(
      expect.arrayContaining([
        'models[0].etcd.endpoints[0]: must be an http:// or https:// URL',
        'models[0].etcd.endpoints[1]: must be a string, got 5',
        expect.stringMatching(/^models\[0\]\.etcd\.prefix: must be a key path starting with \//),
        expect.stringMatching(/^models\[0\]\.etcd\.ttl: unknown field/),
      ]),
    );
    expect(problemsOf(() => load('    etcd: { endpoints: [] }\n'))).toEqual([
      expect.stringMatching(/^models\[0\]\.etcd\.endpoints: must list at least one/),
    ]);
  });
});

describe('etcd registration values', () => {
  const model = load('    etcd: { endpoints: ["http://127.0.0.1:2379"] }\n').models[0]!;
  const key = (id: string): string => `/kvgate/workers/org/m/${id}`;

  it('reads a value as a config worker, the id from the key', () => {
    const w = readEtcdWorker(
      model,
      key('7'),
      JSON.stringify({
        url: 'http://10.0.0.7:8000/',
        kv_events: 'tcp://10.0.0.7:5557',
        dp_size: 2,
        total_kv_blocks: 900,
      }),
      new Map(),
    );
    expect(w).toMatchObject({
      id: 7,
      model: 'org/m',
      url: 'http://10.0.0.7:8000',
      role: 'aggregated',
      dialect: 'vllm',
      dpSize: 2,
      kvEvents: { endpoint: 'tcp://10.0.0.7:5557' },
      totalKvBlocks: 900,
    });
  });

  // issue 30: workers get taints from their registration.
  it('reads taints from a value, deduplicated, and refuses a bad taint naming its index', () => {
    const w = readEtcdWorker(
      model,
      key('9'),
      JSON.stringify({
        url: 'http://10.0.0.9:8000',
        kv_events: 'tcp://10.0.0.9:5557',
        taints: ['h100', 'fp8', 'h100'],
      }),
      new Map(),
    );
    expect(w.taints).toEqual(['h100', 'fp8']);
    const value = { url: 'http://10.0.0.9:8000', kv_events: 'tcp://10.0.0.9:5557', taints: ['ok', 'has space', 3] };
    expect(problemsOf(() => readEtcdWorker(model, key('9'), JSON.stringify(value), new Map()))).toEqual([
      expect.stringMatching(/^taints\[1\]: must be a taint name/),
      expect.stringMatching(/^taints\[2\]: must be a taint name/),
    ]);
  });

  it('refuses a value with any problem whole, naming each field', () => {
    expect(
      problemsOf(() =>
        readEtcdWorker(model, key('7'), JSON.stringify({ url: 'x', id: 3, dp_size: 0, colour: 1 }), new Map()),
      ),
    ).toEqual(
      expect.arrayContaining([
        "id: is not part of the value: the worker id is the key's last segment",
        expect.stringMatching(/^url: must be an absolute http\(s\) URL/),
        expect.stringMatching(/^dp_size: /),
        expect.stringMatching(/^colour: unknown field/),
      ]),
    );
    // The model's rule: KV-aware with KV events on needs kv_events.
    expect(problemsOf(() => readEtcdWorker(model, key('7'), '{"url": "http://h:1"}', new Map()))).toEqual([
      expect.stringMatching(/^kv_events: is required in router_mode kv/),
    ]);
    expect(problemsOf(() => readEtcdWorker(model, key('7'), '{url:', new Map()))).toEqual([
      expect.stringMatching(/^\(value\): is not JSON/),
    ]);
    expect(problemsOf(() => readEtcdWorker(model, key('x7'), '{}', new Map()))).toEqual([
      expect.stringMatching(/^\(key\): must end in \/<worker id>/),
    ]);
    // Only the canonical decimal names a worker: 07 would alias worker 7.
    for (const bad of ['07', '+7', '7.0', ' 7', '0x7', '7e0', '-1', '', '9007199254740992'])
      expect(problemsOf(() => readEtcdWorker(model, key(bad), '{}', new Map()))).toEqual([
        expect.stringMatching(/^\(key\): must end in \/<worker id>: its last segment must be a worker id .*canonical/),
      ]);
    expect(
      problemsOf(() => readEtcdWorker(model, key('1'), '{}', new Map([[1, 'worker 1 of model n (static)']]))),
    ).toEqual([
      '(key): worker id 1 is already the id of worker 1 of model n (static); worker ids are unique across the gateway',
    ]);
  });
});

describe("parseEtcdWorkerId: the one parse of a key's worker id (the gateway and kvgate register)", () => {
  it('reads only a non-negative safe integer as it prints', () => {
    expect(['0', '7', '10', '9007199254740991'].map(parseEtcdWorkerId)).toEqual([0, 7, 10, 9007199254740991]);
    for (const bad of ['07', '00', '+7', '7.0', ' 7', '7 ', '0x7', '7e0', '-1', '', '9007199254740992', '٧'])
      expect(parseEtcdWorkerId(bad), bad).toBeUndefined();
  });
});

describe('kvgate register flags', () => {
  const base = [
    '--etcd',
    'http://127.0.0.1:2379,http://127.0.0.2:2379',
    '--model',
    'org/m',
    '--id',
    '4',
    '--url',
    'http://10.0.0.4:8000',
  ];

  it('builds the key, the value and the lease TTL (10 s by default)', () => {
    const plan = parseRegisterArgs([
      ...base,
      '--kv-events',
      'tcp://10.0.0.4:5557',
      '--kv-events-replay',
      'tcp://10.0.0.4:5558',
      '--dp-size',
      '2',
      '--role',
      'decode',
    ]);
    expect(plan).toEqual({
      help: false,
      endpoints: ['http://127.0.0.1:2379', 'http://127.0.0.2:2379'],
      key: '/kvgate/workers/org/m/4',
      ttlS: 10,
      value: JSON.stringify({
        url: 'http://10.0.0.4:8000',
        role: 'decode',
        dp_size: 2,
        kv_events: { endpoint: 'tcp://10.0.0.4:5557', replay: 'tcp://10.0.0.4:5558' },
      }),
    });
  });

  it.each([
    [['--model', 'm', '--id', '1', '--url', 'http://h:1'], /^--etcd: is required/],
    [[...base, '--ttl', '1'], /^--ttl: 1: must be 2 to 3600 seconds/],
    [[...base, '--dp-size', 'two'], /^--dp-size: "two" is not an integer/],
    [[...base, '--role', 'leader'], /^--role: /],
    [[...base, '--kv-events-replay', 'tcp://h:1'], /^--kv-events-replay: needs --kv-events/],
    [[...base, '--bootstrap-port', '9'], /^--bootstrap-port: only SGLang prefill workers/],
    [[...base, '--colour', 'red'], /Unknown option '--colour'/],
    // The gateway refuses a key 07: register does not write one, nor read 07 as 7.
    [[...base.slice(0, 4), '--id', '07', '--url', 'http://h:1'], /^--id: must be a worker id .*got "07"/],
    [[...base.slice(0, 4), '--id', '+7', '--url', 'http://h:1'], /^--id: must be a worker id/],
  ])('refuses %j naming the flag', (argv, message) => {
    expect(() => parseRegisterArgs(argv)).toThrow(message);
  });
});
