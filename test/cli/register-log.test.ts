/**
 * `kvgate register` logs as the gateway does (pino JSON lines: numeric
 * `level`, epoch `time`, `svc`, `msg`), so one log pipeline reads both. Real
 * processes: a real etcd server and `kvgate register` against it.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { startCli, type CliProcess } from '../helpers/cli-process.js';
import { startEtcdServer, type EtcdServer } from '../helpers/etcd-server.js';

describe('kvgate register logs', () => {
  let etcd: EtcdServer | undefined;
  let p: CliProcess | undefined;
  afterAll(async () => {
    await p?.stop();
    await etcd?.stop();
  });

  it("in the gateway's format: pino JSON lines naming the key", async () => {
    etcd = await startEtcdServer();
    p = startCli([
      'register',
      '--etcd',
      etcd.url,
      '--model',
      'm',
      '--id',
      '7',
      '--url',
      'http://127.0.0.1:9',
      '--ttl',
      '5',
    ]);
    await p.waitFor(/"msg":"registered"/, 'the registration');
    const line = p
      .output()
      .split('\n')
      .find((l) => l.includes('"msg":"registered"'))!;
    const o = JSON.parse(line) as Record<string, unknown>;
    expect(o).toMatchObject({ level: 30, svc: 'kvgate', role: 'register', msg: 'registered' });
    expect(typeof o.time).toBe('number');
    expect(String(o.key)).toMatch(/\/m\/7$/);
  }, 30_000);
});
