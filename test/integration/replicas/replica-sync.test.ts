/**
 * Active-active replicas over a real nats-server: two `kvgate serve`
 * processes (A and B) in front of the same two `kvgate mocker` engines, with
 * replica sync on.
 *
 * issue 15 item 1 (replica sync): load booked through A changes B's decision.
 * issue 15 item 3 (sessions): a session bound on A continues on its worker through B.
 * issue 15 item 2 (liveness, faults): stopping and restarting nats-server mid-traffic
 * loses no request and every replica's bookings return to zero; killing A -9 frees
 * its bookings on B within the peer timeout.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startCli, startMockerCli, type CliProcess, type MockerLine } from '../../helpers/cli-process.js';
import { metric } from '../../helpers/metric-sum.js';
import { startNatsServer, type NatsServer } from '../../helpers/nats-server.js';
import { until } from '../../helpers/until.js';

const MODEL = 'mock-model';
const PEER_TIMEOUT_MS = 1500;
/** A prompt of several 16-token blocks (demo tokenizer). */
const PROMPT = [
  {
    role: 'user',
    content:
      'Summarise the incident report of the storage cluster outage, listing the failed disks, the timeline and the fix. '.repeat(
        3,
      ),
  },
];

function config(dir: string, id: string, nats: string, engines: readonly MockerLine[]): string {
  const file = join(dir, `${id}.yaml`);
  writeFileSync(
    file,
    [
      'listen: { port: 0 }',
      'preprocess: { threads: 0 }',
      `replicas: { router_id: ${id}, nats: { servers: ["${nats}"] }, heartbeat_ms: 200, peer_timeout_ms: ${PEER_TIMEOUT_MS} }`,
      'models:',
      `  - name: ${MODEL}`,
      '    tokenizer: demo',
      '    session_affinity: pin # the bindings replicas share are under test',
      '    workers:',
      ...engines.map((e, i) => `      - { id: ${i + 1}, url: "${e.url}", kv_events: "${e.kv_events[0]}" }`),
      '',
    ].join('\n'),
  );
  return file;
}

async function route(url: string, headers: Record<string, string> = {}): Promise<{ worker: number; overlap: number }> {
  const res = await fetch(`${url}/v1/route`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify({ model: MODEL, messages: PROMPT }),
  });
  expect(res.status).toBe(200);
  const j = (await res.json()) as { worker: { worker_id: number }; overlap_blocks: number };
  return { worker: j.worker.worker_id, overlap: j.overlap_blocks };
}

async function chat(
  url: string,
  body: Record<string, unknown>,
  headers: Record<string, string> = {},
): Promise<{ status: number; worker: number }> {
  const res = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify({ model: MODEL, max_tokens: 4, messages: PROMPT, ...body }),
  });
  await res.arrayBuffer();
  return { status: res.status, worker: Number(res.headers.get('x-kvgate-worker')) };
}

/** Long streamed requests through `url` pinned to `worker`: they hold load until aborted. */
async function holdLoad(url: string, worker: number, n: number): Promise<AbortController> {
  const ac = new AbortController();
  await Promise.all(
    Array.from({ length: n }, async (_, i) => {
      const res = await fetch(`${url}/v1/chat/completions`, {
        method: 'POST',
        signal: ac.signal,
        headers: { 'content-type': 'application/json', 'x-worker-instance-id': String(worker) },
        body: JSON.stringify({
          model: MODEL,
          stream: true,
          max_tokens: 4000,
          messages: [
            { role: 'user', content: `job ${i}: ${'write a very long essay about distributed caches. '.repeat(60)}` },
          ],
        }),
      });
      expect(res.status).toBe(200);
      // The first chunk: the request is dispatched and booked.
      const reader = res.body!.getReader();
      await reader.read();
      void (async () => {
        try {
          while (!(await reader.read()).done);
        } catch {
          // aborted
        }
      })();
    }),
  );
  return ac;
}

describe('replica sync over NATS between two kvgate serve processes', () => {
  let nats: NatsServer;
  let mocker: CliProcess;
  let a: CliProcess;
  let b: CliProcess;
  let urlA: string;
  let urlB: string;
  let dir: string;

  beforeAll(async () => {
    nats = await startNatsServer();
    const m = await startMockerCli(['--model', MODEL, '--tokenizer', 'demo', '--speedup', '1'], 2);
    mocker = m.proc;
    dir = mkdtempSync(join(tmpdir(), 'kvgate-replicas-'));
    a = startCli(['serve', '-c', config(dir, 'a', nats.url, m.engines)]);
    b = startCli(['serve', '-c', config(dir, 'b', nats.url, m.engines)]);
    urlA = (await a.waitFor(/"listen":"(http:\/\/[^"]+)"/, 'A listening'))[1]!;
    urlB = (await b.waitFor(/"listen":"(http:\/\/[^"]+)"/, 'B listening'))[1]!;
    await until(
      async () =>
        (await metric(urlA, 'kvgate_replica_peers')) === 1 && (await metric(urlB, 'kvgate_replica_peers')) === 1,
      'A and B see each other',
      15_000,
    );
  }, 60_000);

  afterAll(async () => {
    await Promise.allSettled([a?.stop(), b?.stop(), mocker?.stop()]);
    await nats?.stop();
    if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
  });

  // issue 15 item 1
  it("load booked through A moves B's choice off the loaded worker, and back once it is freed", async () => {
    // Worker 1 caches the prompt: B alone sends it there.
    expect((await chat(urlB, {}, { 'x-worker-instance-id': '1' })).status).toBe(200);
    await until(
      async () => (await route(urlB)).worker === 1 && (await route(urlB)).overlap > 0,
      'B prefers worker 1 for the cached prompt',
      10_000,
    );

    const load = await holdLoad(urlA, 1, 4);
    await until(async () => (await route(urlB)).worker === 2, 'B routes away from worker 1 loaded through A', 5000);
    await until(
      async () => (await metric(urlB, 'kvgate_worker_peer_load_share', { worker_id: '1' })) === 1,
      "B reports worker 1's load as all from peers",
      5000,
    );
    await until(
      async () => (await metric(urlB, 'kvgate_worker_active_requests', { worker_id: '1' })) === 4,
      "B counts A's four requests on worker 1",
      5000,
    );
    expect(await metric(urlB, 'kvgate_replica_sync_messages_received_total', { kind: 'ops' })).toBeGreaterThan(0);
    expect(await metric(urlA, 'kvgate_replica_sync_messages_sent_total', { kind: 'ops' })).toBeGreaterThan(0);

    load.abort();
    await until(
      async () => (await metric(urlB, 'kvgate_worker_active_requests')) === 0,
      "A's bookings freed on B",
      10_000,
    );
    expect((await route(urlB)).worker).toBe(1);
  }, 40_000);

  // issue 15 item 3
  it('a session bound on A continues on the same worker when its next turn reaches B', async () => {
    const session = { 'x-session-id': 'conversation-42' };
    // B on its own sends this prompt to worker 1 (it holds its prefix): the session is bound to worker 2 on A.
    expect((await route(urlB)).worker).toBe(1);
    const first = await chat(urlA, {}, { ...session, 'x-worker-instance-id': '2' });
    expect(first).toEqual({ status: 200, worker: 2 });
    await until(
      async () =>
        (await metric(urlB, 'kvgate_replica_sync_ops_applied_total', { op: 'session', outcome: 'adopted' })) >= 1,
      'B adopts the binding',
      5000,
    );
    expect(await chat(urlB, {}, session)).toEqual({ status: 200, worker: 2 });
  }, 20_000);

  // issue 15 item 2
  it('stopping and restarting nats-server mid-traffic loses no request, and the bookings return to zero', async () => {
    const statuses: number[] = [];
    let stop = false;
    const traffic = (async () => {
      for (let i = 0; !stop; i++) {
        const url = i % 2 === 0 ? urlA : urlB;
        statuses.push(
          (
            await chat(url, {
              messages: [{ role: 'user', content: `request ${i}: ${'tell me about caches. '.repeat(10)}` }],
            })
          ).status,
        );
      }
    })();
    await until(() => statuses.length >= 5, 'traffic before the outage', 10_000);
    expect(await metric(urlA, 'kvgate_replica_sync_bus_up')).toBe(1);
    const connects = await metric(urlA, 'kvgate_replica_sync_bus_transitions_total', { transition: 'connected' });
    await nats.stop();
    const before = statuses.length;
    await until(() => statuses.length >= before + 6, 'traffic during the outage', 10_000);
    await until(async () => (await metric(urlA, 'kvgate_replica_sync_bus_up')) === 0, 'A sees the bus down', 10_000);
    expect(await metric(urlA, 'kvgate_replica_sync_bus_transitions_total', { transition: 'disconnected' })).toBe(1);
    await nats.restart();
    await until(
      async () =>
        (await metric(urlA, 'kvgate_replica_peers')) === 1 && (await metric(urlB, 'kvgate_replica_peers')) === 1,
      'peers again after the restart',
      15_000,
    );
    // The client tells of its reconnection apart from the messages it carries: either may come first.
    await until(async () => (await metric(urlA, 'kvgate_replica_sync_bus_up')) === 1, 'A sees the bus back', 10_000);
    expect(await metric(urlA, 'kvgate_replica_sync_bus_transitions_total', { transition: 'connected' })).toBe(
      connects + 1,
    );
    const after = statuses.length;
    await until(() => statuses.length >= after + 6, 'traffic after the outage', 10_000);
    stop = true;
    await traffic;
    expect(statuses.filter((s) => s !== 200)).toEqual([]);
    await until(
      async () =>
        (await metric(urlA, 'kvgate_worker_active_requests')) === 0 &&
        (await metric(urlB, 'kvgate_worker_active_requests')) === 0,
      "every replica's bookings back to zero",
      10_000,
    );
    expect(
      (await metric(urlA, 'kvgate_replica_sync_messages_dropped_total', { direction: 'out' })) +
        (await metric(urlB, 'kvgate_replica_sync_messages_dropped_total', { direction: 'out' })),
    ).toBeGreaterThan(0);
  }, 60_000);

  // issue 15 item 2
  it('killing A -9 frees its bookings on B within the peer timeout', async () => {
    await holdLoad(urlA, 1, 3);
    await until(
      async () => (await metric(urlB, 'kvgate_worker_active_requests', { worker_id: '1' })) === 3,
      "B sees A's three bookings",
      5000,
    );
    const killedAt = performance.now();
    a.child.kill('SIGKILL');
    await until(
      async () => (await metric(urlB, 'kvgate_worker_active_requests', { worker_id: '1' })) === 0,
      "B drops A's bookings",
      PEER_TIMEOUT_MS + 3000,
    );
    expect(performance.now() - killedAt).toBeLessThan(PEER_TIMEOUT_MS + 3000);
    expect(await metric(urlB, 'kvgate_replica_peer_timeouts_total')).toBe(1);
    expect(await metric(urlB, 'kvgate_replica_peers')).toBe(0);
  }, 20_000);
});
