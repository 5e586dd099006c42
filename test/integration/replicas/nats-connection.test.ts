/**
 * The NATS connection's keys take effect (`replicas.nats`): a `kvgate serve` with a short ping interval notices a
 * NATS server that stops answering without closing its connections (a paused process, as a hung server or a
 * partition leaves them) within a few hundred milliseconds, where the defaults take 10 s (two unanswered pings,
 * 5 s apart), and reconnects once it answers again; a short connect timeout lets one whose server is silent from
 * its start try again soon. Over a real nats-server, paused with SIGSTOP.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { jsonLogLines, startMockerCli, startServeCli, type CliProcess } from '../../helpers/cli-process.js';
import { metric } from '../../helpers/metric-sum.js';
import { startNatsServer, type NatsServer } from '../../helpers/nats-server.js';
import { until } from '../../helpers/until.js';

const MODEL = 'mock-model';

/**
 * A gateway config over one engine, its replicas on `natsUrl` with pings every 100 ms (one may go unanswered) and
 * the connection keys in `nats` besides.
 */
function gatewayFile(
  dir: string,
  natsUrl: string,
  engine: { readonly url: string; readonly kv_events: readonly string[] },
  nats = '',
): string {
  const file = join(dir, 'kvgate.yaml');
  writeFileSync(
    file,
    [
      'listen: { port: 0 }',
      'preprocess: { threads: 0 }',
      'replicas:',
      `  nats: { servers: ["${natsUrl}"], ping_interval_ms: 100, max_pings_out: 1, reconnect_wait_ms: 50${nats} }`,
      '  warm_start: false',
      'models:',
      `  - name: ${MODEL}`,
      '    tokenizer: demo',
      `    workers: [{ id: 1, url: "${engine.url}", kv_events: "${engine.kv_events[0]}" }]`,
      '',
    ].join('\n'),
  );
  return file;
}

describe('replica sync: the NATS connection keys', () => {
  const cleanups: (() => Promise<void> | void)[] = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
  });

  /** An engine and a gateway on `nats` (`natsKeys` added to its connection's), each stopped after the test. */
  async function gatewayOn(nats: NatsServer, natsKeys = ''): Promise<{ proc: CliProcess; url: string }> {
    const m = await startMockerCli(['--model', MODEL, '--tokenizer', 'demo', '--speedup', '1'], 1);
    cleanups.push(() => m.proc.stop());
    const dir = mkdtempSync(join(tmpdir(), 'kvgate-nats-connection-'));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    const { proc, url } = await startServeCli(gatewayFile(dir, nats.url, m.engines[0]!, natsKeys));
    cleanups.push(() => proc.stop());
    return { proc, url };
  }

  /** A nats-server, an engine and a gateway on them, its bus up; each stopped after the test. */
  async function gatewayOnNats(): Promise<{ nats: NatsServer; proc: CliProcess; url: string }> {
    const nats = await startNatsServer();
    cleanups.push(() => nats.stop());
    const { proc, url } = await gatewayOn(nats);
    await until(async () => (await metric(url, 'kvgate_replica_sync_bus_up')) === 1, 'the bus up');
    return { nats, proc, url };
  }

  /** The bus's warn line (the first), once the process printed it. */
  const unavailable = (proc: CliProcess): Record<string, unknown> | undefined =>
    jsonLogLines(proc).find((l) => String(l['msg']).startsWith('replica sync bus unavailable'));

  it('a short ping interval notices a silent NATS server within a second; the bus comes back when it answers', async () => {
    const { nats, proc, url } = await gatewayOnNats();

    nats.pause();
    // Runs first if the test fails while the server is paused: a gateway stopping against a silent server would wait.
    cleanups.push(() => nats.resume());
    const paused = performance.now();
    // The defaults (two pings 5 s apart) would take 10 s: the configured ones, about 200 ms.
    await until(async () => (await metric(url, 'kvgate_replica_sync_bus_up')) === 0, 'the bus down', 3000);
    expect(performance.now() - paused).toBeLessThan(3000);
    // Logged in the turn the gauge fell, but its line comes through the process's stdout pipe and may arrive after
    // the scrape's answer (a loaded machine): waited for, not read once.
    await until(() => unavailable(proc) !== undefined, "the bus's warn line", 3000);
    expect(unavailable(proc)).toMatchObject({ level: 40 });

    nats.resume();
    await until(async () => (await metric(url, 'kvgate_replica_sync_bus_up')) === 1, 'the bus up again', 10_000);
  }, 60_000);

  it('a gateway whose NATS server went silent stops on SIGTERM by itself, its reconnect attempt closed', async () => {
    const { nats, proc, url } = await gatewayOnNats();
    nats.pause();
    cleanups.push(() => nats.resume()); // first, should the test fail while the server is paused
    await until(async () => (await metric(url, 'kvgate_replica_sync_bus_up')) === 0, 'the bus down', 3000);
    // It stayed up until the server answered again: its connection to the silent server kept the process alive.
    // 'close': the output read to its end, so a line logged just before the exit is in it.
    const exited = new Promise<number | null>((resolve) => proc.child.once('close', (code) => resolve(code)));
    const signalled = performance.now();
    proc.child.kill('SIGTERM');
    const code = await Promise.race([exited, new Promise<'alive'>((r) => setTimeout(() => r('alive'), 15_000))]);
    expect(code).toBe(0);
    const lines = jsonLogLines(proc);
    expect(lines.some((l) => l['msg'] === 'kvgate gateway stopped')).toBe(true);
    // The exit guard did not end it (it logs at warn, 2 s after the shutdown ended): the client's reconnect attempt,
    // its socket open toward the silent server and waiting for its greeting, was closed with the bus. Before, the
    // guard ended the process (about 2.4 s after SIGTERM; 0.4 s with the attempt closed).
    expect(lines.filter((l) => String(l['msg']).startsWith('shutdown: handles still open'))).toEqual([]);
    expect(performance.now() - signalled).toBeLessThan(2000);
  }, 60_000);

  it('a NATS server silent from the start: the first connect times out, is tried again, and the bus comes up once it answers', async () => {
    const nats = await startNatsServer();
    cleanups.push(() => nats.stop());
    nats.pause();
    cleanups.push(() => nats.resume()); // first, should the test fail while the server is paused
    const { proc, url } = await gatewayOn(nats, ', connect_timeout_ms: 200');

    // The first attempt timed out: logged and counted once, however many attempts follow (one each 450 ms).
    await until(() => unavailable(proc) !== undefined, "the bus's warn line", 5000);
    expect(unavailable(proc)).toMatchObject({ level: 40, detail: expect.stringMatching(/timeout$/) });
    expect(await metric(url, 'kvgate_replica_sync_bus_up')).toBe(0);

    nats.resume();
    // Before, the first timeout ended the attempts: the bus stayed down for the life of the process.
    await until(async () => (await metric(url, 'kvgate_replica_sync_bus_up')) === 1, 'the bus up', 10_000);
    const transitions = (transition: string) =>
      metric(url, 'kvgate_replica_sync_bus_transitions_total', { transition });
    expect(await transitions('disconnected')).toBe(1);
    expect(await transitions('connected')).toBe(1);
    await until(
      () => jsonLogLines(proc).some((l) => l['msg'] === 'replica sync bus connected'),
      "the bus's info line",
      3000,
    );
  }, 60_000);
});
