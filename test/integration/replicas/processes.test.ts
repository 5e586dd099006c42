/**
 * `kvgate serve --processes 2` without NATS: two gateway processes on one port
 * (node:cluster) in front of two `kvgate mocker` engines, sharing bookings over
 * the cluster's IPC channel. Which process accepts a connection is the
 * kernel's and the primary's choice, so every request goes on a fresh
 * connection and the `x-kvgate-process` header says who answered.
 *
 * issue 15 item 2 (must-show 2): one port, and load booked through one process
 * steers the other's decisions.
 */
import { request, type ClientRequest } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startCli, type CliProcess } from '../../helpers/cli-process.js';
import { fresh } from '../../helpers/fresh-request.js';
import { serveConfig, startMockerSuite, workerEntry, type MockerSuite } from '../../helpers/serve-suite.js';
import { until } from '../../helpers/until.js';

const MODEL = 'mock-model';
const PROMPT = [
  {
    role: 'user',
    content:
      'Summarise the incident report of the storage cluster outage, listing the failed disks, the timeline and the fix. '.repeat(
        3,
      ),
  },
];

/** A long streamed request pinned to `worker`, held open until destroyed; resolves once it is dispatched (first chunk). */
function hold(url: string, worker: number, i: number): Promise<{ process: string; req: ClientRequest }> {
  return new Promise((resolve, reject) => {
    const req = request(
      `${url}/v1/chat/completions`,
      {
        agent: false,
        method: 'POST',
        headers: { connection: 'close', 'content-type': 'application/json', 'x-worker-instance-id': String(worker) },
      },
      (res) => {
        expect(res.statusCode).toBe(200);
        res.once('data', () => resolve({ process: String(res.headers['x-kvgate-process']), req }));
        res.on('error', () => undefined);
      },
    );
    req.on('error', (err) => (req.destroyed ? undefined : reject(err)));
    req.end(
      JSON.stringify({
        model: MODEL,
        stream: true,
        max_tokens: 4000,
        messages: [
          { role: 'user', content: `job ${i}: ${'write a very long essay about distributed caches. '.repeat(60)}` },
        ],
      }),
    );
  });
}

/** The sum of a metric's series of one process (a scrape of either process shows both processes' series). */
async function metricOf(
  url: string,
  process: string,
  name: string,
  labels: Record<string, string> = {},
): Promise<number | undefined> {
  const a = await fresh(url, '/metrics');
  if (a.status !== 200) return undefined;
  let sum = 0;
  for (const line of a.body.split('\n')) {
    if (!line.startsWith(`${name}{`)) continue;
    if (!Object.entries({ ...labels, process }).every(([k, v]) => line.includes(`${k}="${v}"`))) continue;
    sum += Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return sum;
}

/** `/v1/route` for the prompt, on a fresh connection. */
async function route(url: string): Promise<{ process: string; worker: number; overlap: number }> {
  const a = await fresh(url, '/v1/route', { model: MODEL, messages: PROMPT });
  expect(a.status).toBe(200);
  const j = JSON.parse(a.body) as { worker: { worker_id: number }; overlap_blocks: number };
  return { process: a.process, worker: j.worker.worker_id, overlap: j.overlap_blocks };
}

/** Polls `/v1/route` until `want` held for an answer of each process in `processes`. */
async function routedBy(
  url: string,
  processes: readonly string[],
  want: (r: { worker: number; overlap: number }) => boolean,
  what: string,
): Promise<void> {
  const ok = new Set<string>();
  await until(
    async () => {
      const r = await route(url);
      if (processes.includes(r.process) && want(r)) ok.add(r.process);
      return ok.size === processes.length;
    },
    what,
    15_000,
  );
}

describe('kvgate serve --processes N without models', () => {
  it('is refused: the embedded demo runs in one process', async () => {
    const demo = startCli(['serve', '--port', '0', '--processes', '2']);
    const code = await new Promise<number | null>((resolve) => demo.child.once('exit', (c) => resolve(c)));
    expect(code).toBe(2);
    expect(demo.output()).toContain('processes: the embedded demo runs in one process');
  }, 30_000);
});

describe('kvgate serve --processes 2 (replica sync over the cluster IPC channel)', () => {
  let suite: MockerSuite;
  let gw: CliProcess;
  let url: string;

  beforeAll(async () => {
    suite = await startMockerSuite('processes', ['--model', MODEL, '--tokenizer', 'demo', '--speedup', '1'], 2);
    const file = suite.write(
      'gw.yaml',
      serveConfig(
        MODEL,
        ['workers:', ...suite.engines.map((e, i) => `  - ${workerEntry(i + 1, e)}`)],
        ['replicas: { heartbeat_ms: 200, peer_timeout_ms: 1500 }'],
      ),
    );
    gw = startCli(['serve', '-c', file, '--processes', '2']);
    suite.procs.push(gw);
    url = (await gw.waitFor(/"listen":"(http:\/\/[^"]+)","process"/, 'the processes listen', 30_000))[1]!;
    // Both processes up and each seeing the other as a peer.
    const peered = new Set<string>();
    await until(
      async () => {
        const a = await fresh(url, '/metrics').catch(() => undefined);
        if (a?.status === 200 && /^kvgate_replica_peers\{[^}]*\} 1$/m.test(a.body)) peered.add(a.process);
        return peered.size === 2;
      },
      'both processes serve on the one port and see each other',
      30_000,
    );
    expect([...peered].sort()).toEqual(['1', '2']);
  }, 60_000);

  afterAll(async () => {
    await suite?.stop();
  });

  // issue 15 item 2
  it('long streams on worker 1 held through one process make the other process route away from worker 1', async () => {
    // Worker 1 caches the prompt: each process on its own sends it there.
    expect(
      (
        await fresh(
          url,
          '/v1/chat/completions',
          { model: MODEL, max_tokens: 4, messages: PROMPT },
          { 'x-worker-instance-id': '1' },
        )
      ).status,
    ).toBe(200);
    await routedBy(
      url,
      ['1', '2'],
      (r) => r.worker === 1 && r.overlap > 0,
      'both processes prefer worker 1 for the cached prompt',
    );

    // Four streams held through one process (P); those the cluster gave the other (Q) are let go at once.
    const held: ClientRequest[] = [];
    let p: string | undefined;
    for (let i = 0; held.length < 4; i++) {
      const h = await hold(url, 1, i);
      p ??= h.process;
      if (h.process === p) held.push(h.req);
      else h.req.destroy();
    }
    const q = p === '1' ? '2' : '1';
    // Q holds none of them itself: all of worker 1's load it sees was booked through P.
    await until(
      async () => (await metricOf(url, q, 'kvgate_worker_active_requests', { worker_id: '1' })) === 4,
      `process ${q} counts the 4 streams of process ${p}`,
      15_000,
    );
    expect(
      await until(
        async () => (await metricOf(url, q, 'kvgate_worker_peer_load_share', { worker_id: '1' })) === 1,
        'all from its peer',
        5000,
      ),
    ).toBeUndefined();
    await routedBy(url, [q], (r) => r.worker === 2, `process ${q} routes away from worker 1`);

    for (const r of held) r.destroy();
    await until(
      async () => (await metricOf(url, q, 'kvgate_worker_active_requests')) === 0,
      `process ${q} sees the streams freed`,
      15_000,
    );
    await routedBy(url, ['1', '2'], (r) => r.worker === 1, 'both processes back on worker 1');
  }, 60_000);

  // One scrape of the shared port shows every process's series, told apart by the `process` label.
  it('/metrics on the shared port gathers the series of both processes, whichever answers', async () => {
    for (let i = 0; i < 4; i++) {
      const a = await fresh(url, '/metrics');
      expect(a.status).toBe(200);
      for (const p of ['1', '2'])
        expect(a.body).toMatch(new RegExp(`^kvgate_build_info\\{[^}]*process="${p}"[^}]*\\} 1$`, 'm'));
      // One family header per metric: the exposition stays valid for Prometheus.
      expect(a.body.match(/^# TYPE kvgate_build_info /gm)).toHaveLength(1);
    }
  }, 30_000);

  // issue 15 item 2: the primary restarts nothing silently
  it('a gateway process killed is logged and counted by the primary, and the other keeps serving the port', async () => {
    const pids = JSON.parse(gw.output().match(/"pids":(\[[0-9,]+\])/)![1]!) as number[];
    process.kill(pids[0]!, 'SIGKILL');
    await gw.waitFor(
      /"exits":1,"serving":1,.*gateway process \d exited \(SIGKILL\); it is not restarted/,
      'the primary reports the exit',
    );
    for (let i = 0; i < 4; i++) expect((await route(url)).worker).toBeGreaterThan(0);
  }, 30_000);

  // issue 15 item 2: SIGTERM reaches every process; the primary exits once they have drained
  it('SIGTERM to the primary is forwarded; it exits 0 once its processes are gone', async () => {
    const exited = new Promise<number | null>((resolve) => gw.child.once('exit', (code) => resolve(code)));
    gw.child.kill('SIGTERM');
    expect(await exited).toBe(0);
    expect(gw.output()).toContain('forwarding SIGTERM to the gateway processes');
    await expect(fresh(url, '/v1/models')).rejects.toThrow();
  }, 30_000);
});
