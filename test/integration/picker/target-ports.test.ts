/**
 * `kvgate picker` over an InferencePool with two target ports (GIE v1 allows up to 8: every port of a pod is an
 * endpoint, one data-parallel rank served on its own port), over real gRPC sockets: the test plays Envoy, the
 * Kubernetes API double lists the pods and the pool and watches both (no cluster or Envoy runs here). A
 * `kvgate mocker` with two data-parallel ranks stands for the pod's engine: each rank publishes its KV events where
 * a data-parallel vLLM's does, on the pod's KV-event port + its rank, each batch naming that rank. Its HTTP port is
 * taken as rank 0's and a second free port as rank 1's (the test plays Envoy: no request of the picker's reaches
 * them; a prompt sent past the picker to rank r goes to the engine with `x-data-parallel-rank: r`). The picker
 * routes to both ports, keeps to the one port a subset names, and credits rank 1's events to port 2: a prefix
 * rank 1 holds is picked there. An edit of the pool (its ports, then its selector) is followed at once while the
 * pods' watch is live, and an invalid edit keeps what is.
 */
import { createServer } from 'node:net';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startPicker, type RunningPicker } from '../../../src/picker/index.js';
import type { CliProcess } from '../../helpers/cli-process.js';
import { ExtProcClient, requestHeaders, type ExtProcStream } from '../../helpers/ext-proc-client.js';
import { KubeApiDouble, type InferencePool } from '../../helpers/kube-api-double.js';
import { sampleSum } from '../../helpers/metric-sum.js';
import { until } from '../../helpers/until.js';
import { MODEL, pickerConfig } from './pool-config.js';
import { doc, startPod, untilSubscribed } from './pod.js';

const IP = '127.0.0.51';
const OTHER_IP = '127.0.0.52';
const CHAT = '/v1/chat/completions';

const body = (content: string): string =>
  JSON.stringify({ model: MODEL, messages: [{ role: 'user', content }], max_tokens: 2 });

/** Whether `port` on `host` can be bound now. */
const free = (host: string, port: number): Promise<number | undefined> =>
  new Promise((resolve) => {
    const s = createServer();
    s.once('error', () => resolve(undefined));
    s.listen(port, host, () => {
      const bound = (s.address() as { port: number }).port;
      s.close(() => resolve(bound));
    });
  });

/** A port the OS chooses on `host` whose next port is free too: a two-rank engine's KV-event ports. */
async function twoFreePorts(host: string): Promise<number> {
  for (;;) {
    const port = (await free(host, 0))!;
    if (port < 65535 && (await free(host, port + 1)) !== undefined) return port;
  }
}

describe('kvgate picker: a pool with two target ports, one data-parallel rank on each (the Kubernetes API double)', () => {
  const procs: CliProcess[] = [];
  let kube: KubeApiDouble;
  let picker: RunningPicker;
  let client: ExtProcClient;
  let ports: number[];
  let rank: string[];
  const logs: Record<string, unknown>[] = [];

  const scrape = async (name: string, labels: Record<string, string>): Promise<number> =>
    sampleSum(await (await fetch(picker.metricsUrl!)).text(), name, labels);
  const applied = (): Promise<number> =>
    scrape('kvgate_kv_events_applied_total', { event_type: 'stored', status: 'ok' });
  const pool = (labels: Record<string, string>, targetPorts: number[]): InferencePool => ({
    metadata: { name: 'dp', namespace: 'default' },
    spec: { selector: { matchLabels: labels }, targetPorts: targetPorts.map((number) => ({ number })) },
  });
  const routed = (): string[] => Object.keys(picker.loads()).sort();
  /** Sends `content` straight to the engine's rank `dpRank`, past the picker. */
  const direct = async (dpRank: number, content: string): Promise<void> => {
    const res = await fetch(`http://${rank[0]}${CHAT}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-data-parallel-rank': String(dpRank) },
      body: body(content),
    });
    expect(res.status).toBe(200);
    await res.arrayBuffer();
  };
  /** The endpoints the picker answers for `content` (the pick first), on a stream left open (its booking held). */
  const pickOn = async (s: ExtProcStream, content: string, subset?: string[]): Promise<string[]> => {
    const hint =
      subset === undefined
        ? undefined
        : { 'envoy.lb.subset_hint': { 'x-gateway-destination-endpoint-subset': subset } };
    s.send(requestHeaders(CHAT, {}, hint));
    s.send({ request_body: { body: Buffer.from(body(content)), end_of_stream: true } });
    const [answer] = await s.next(1);
    const list = JSON.stringify(answer).match(/"stringValue":"([^"]+)"/)?.[1];
    expect(list, JSON.stringify(answer)).toBeDefined();
    return list!.split(',');
  };
  /** The same, the stream then reset (its booking freed). */
  const pick = async (content: string, subset?: string[]): Promise<string[]> => {
    const s = client.open();
    const list = await pickOn(s, content, subset);
    s.cancel();
    return list;
  };

  beforeAll(async () => {
    kube = await KubeApiDouble.start();
    const kvPort = await twoFreePorts(IP);
    // Rank r publishes on the pod's KV-event port + r, as a data-parallel vLLM does.
    const engine = await startPod(IP, 0, kvPort, 2);
    procs.push(engine.proc);
    ports = [Number(new URL(engine.engine.url).port), (await free(IP, 0))!];
    rank = ports.map((p) => `${IP}:${p}`);
    kube.putPod({
      metadata: { name: 'dp-0', labels: { app: 'dp' }, annotations: { 'kvgate.io/kv-events-port': `${kvPort}` } },
      status: { podIP: IP, conditions: [{ type: 'Ready', status: 'True' }] },
    });
    kube.putPod({
      metadata: { name: 'other-0', labels: { app: 'other' } },
      status: { podIP: OTHER_IP, conditions: [{ type: 'Ready', status: 'True' }] },
    });
    kube.putPool(pool({ app: 'dp' }, ports));
    const config = pickerConfig(kube.url, 'dp', { use_kv_events: true }, { admin: { enabled: true } });
    const sink = { write: (line: string): void => void logs.push(JSON.parse(line) as Record<string, unknown>) };
    picker = await startPicker(config, pino({ level: 'info' }, sink));
    client = new ExtProcClient(picker.address);
    await until(async () => (await client.check('readiness')) === 'SERVING', 'the picker ready');
  }, 60_000);

  afterAll(async () => {
    client?.close();
    await picker?.stop();
    await Promise.allSettled(procs.map((p) => p.stop()));
    await kube?.close();
  });

  it("routes to both of the pod's ports, and keeps to the one port a subset names", async () => {
    await until(() => routed().join() === [...rank].sort().join(), 'both ports of the pod routed');
    // A request held on one port: the next, with no prefix in common, goes to the other, the first as its fallback.
    const held = client.open();
    const [first] = await pickOn(held, doc('held', 40));
    const other = rank.find((e) => e !== first)!;
    expect(await pick(doc('next', 40))).toEqual([other, first]);
    expect(picker.loads()[first!]!.activeRequests).toBe(1);
    // A subset naming one port of the pod: that port alone, even the busier one; the bare address: either.
    for (const e of rank) expect(await pick(doc(`only${e}`, 40), [e])).toEqual([e]);
    expect((await pick(doc('bare', 40), [IP])).sort()).toEqual([...rank].sort());
    held.cancel();
    await until(() => Object.keys(picker.bookings()).length === 0, 'every booking freed');
  });

  it("credits the KV events published on the pod's KV-event port + 1 to port 2: a prefix it holds is picked there", async () => {
    await untilSubscribed(rank.length, (i, d) => direct(i, d), applied);
    // Sent past the picker: only the ranks' events tell it where each document is.
    for (const [i, endpoint] of rank.entries()) {
      const before = await applied();
      await direct(i, doc(`doc${i}`));
      await until(async () => (await applied()) > before, `the document on ${endpoint} indexed`);
    }
    for (const [i, endpoint] of [...rank.entries()].reverse())
      for (let turn = 0; turn < 3; turn++) expect((await pick(`${doc(`doc${i}`)} question ${turn}`))[0]).toBe(endpoint);
    await until(() => Object.keys(picker.bookings()).length === 0, 'every booking freed');
  }, 60_000);

  it('follows an edit of the pool at once while its pods are watched: its ports, its selector; an invalid edit keeps what is', async () => {
    const updates = (outcome: string): Promise<number> =>
      scrape('kvgate_discovery_updates_total', { model: MODEL, source: 'inference_pool', outcome });
    const retries = (): Promise<number> =>
      scrape('kvgate_discovery_watch_retries_total', { model: MODEL, source: 'inference_pool' });
    const applies = await updates('applied');
    // Port 2 alone: the pod's one endpoint is now that port (rank 0 of a one-port pool).
    kube.putPool(pool({ app: 'dp' }, [ports[1]!]));
    await until(() => routed().join() === rank[1], 'the ports edited');
    expect(logs).toContainEqual(
      expect.objectContaining({ ports: [ports[1]], msg: 'InferencePool read: selector and target ports' }),
    );
    expect(await updates('applied')).toBe(applies + 1);
    // Another selector: the pods are listed again with it, both ports of the other pod routed.
    kube.putPool(pool({ app: 'other' }, ports));
    const others = ports.map((p) => `${OTHER_IP}:${p}`).sort();
    await until(() => routed().join() === others.join(), 'the selector edited');
    expect(logs).toContainEqual(
      expect.objectContaining({ msg: 'InferencePool default/dp: selector edited, listing its pods again' }),
    );
    expect(await updates('applied')).toBe(applies + 2);
    // No target port: refused, counted, the endpoints stay; the pods' watch dropped for the new selector is no failure.
    const rejected = await updates('rejected');
    kube.putPool(pool({ app: 'dp' }, []));
    await until(async () => (await updates('rejected')) === rejected + 1, 'the invalid edit refused');
    expect(logs).toContainEqual(
      expect.objectContaining({ level: 40, msg: expect.stringMatching(/its current endpoints stay$/) }),
    );
    expect(routed()).toEqual(others);
    expect(await retries()).toBe(0);
  });
});
