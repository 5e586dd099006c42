/**
 * `kvgate picker` watches its pods' KV-event liveness as `kvgate serve` watches its workers': a pod whose events stop
 * while it serves, or never come though it is picked, is a warn line naming its endpoint, counted in
 * `kvgate_worker_kv_events_transitions_total`, its `kvgate_worker_kv_events_live` 0, and scored in approximate mode
 * (the router's own choices) until its events come again (an info line, counted). Pod A's publisher is a test ZMQ
 * publisher the test drives; pod B names a publisher where nothing listens. Pods are listed by the Kubernetes API
 * double; the test plays Envoy over real gRPC; no engine runs (a pick is all that is asked of the picker).
 */
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startPicker, type RunningPicker } from '../../../src/picker/index.js';
import { ExtProcClient, requestHeaders } from '../../helpers/ext-proc-client.js';
import { KubeApiDouble } from '../../helpers/kube-api-double.js';
import { sampleSum } from '../../helpers/metric-sum.js';
import { until } from '../../helpers/until.js';
import { TestKvPublisher } from '../../helpers/zmq-publisher.js';
import { MODEL, pickerConfig } from './pool-config.js';

const CHAT = '/v1/chat/completions';
const A = '127.0.0.1:8000';
const B = '127.0.0.2:8000';

describe("kvgate picker: its pods' KV-event liveness (the test plays Envoy; no cluster, no Envoy)", () => {
  let kube: KubeApiDouble;
  let publisher: TestKvPublisher;
  let picker: RunningPicker;
  let client: ExtProcClient;
  const logs: Record<string, unknown>[] = [];

  const metric = async (name: string, labels: Record<string, string>): Promise<number> =>
    sampleSum(await (await fetch(picker.metricsUrl!)).text(), name, { model: MODEL, ...labels });
  const lineOf = (endpoint: string, msg: RegExp): Record<string, unknown> | undefined =>
    logs.find((l) => l['endpoint'] === endpoint && msg.test(String(l['msg'])));
  /** Asks for a pick among `subset`; the stream is then reset (booking freed), as Envoy does once it dispatched. */
  const pick = async (subset: string): Promise<void> => {
    const s = client.open();
    const hint = { 'envoy.lb.subset_hint': { 'x-gateway-destination-endpoint-subset': [subset] } };
    s.send(requestHeaders(CHAT, {}, hint));
    const body = JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hello' }], max_tokens: 2 });
    s.send({ request_body: { body: Buffer.from(body), end_of_stream: true } });
    await s.next(1);
    s.cancel();
  };

  beforeAll(async () => {
    kube = await KubeApiDouble.start();
    publisher = await TestKvPublisher.start();
    const kvPort = new URL(publisher.endpoint.replace('tcp:', 'http:')).port;
    for (const [name, ip] of [
      ['pod-a', '127.0.0.1'],
      ['pod-b', '127.0.0.2'],
    ] as const)
      kube.putPod({
        metadata: { name, labels: { app: 'vllm' }, annotations: { 'kvgate.io/kv-events-port': kvPort } },
        status: { podIP: ip, conditions: [{ type: 'Ready', status: 'True' }] },
      });
    kube.putPool({
      metadata: { name: 'pool', namespace: 'default' },
      spec: { selector: { matchLabels: { app: 'vllm' } }, targetPorts: [{ number: 8000 }] },
    });
    const config = pickerConfig(
      kube.url,
      'pool',
      { use_kv_events: true },
      { admin: { enabled: true }, kv_events: { stale_after_ms: 300 } },
    );
    const sink = { write: (line: string): void => void logs.push(JSON.parse(line) as Record<string, unknown>) };
    picker = await startPicker(config, pino({ level: 'info' }, sink));
    client = new ExtProcClient(picker.address);
    await until(async () => (await client.check('readiness')) === 'SERVING', 'the picker ready');
  }, 30_000);

  afterAll(async () => {
    client?.close();
    await picker?.stop();
    await publisher?.close();
    await kube?.close();
  });

  it('a pod whose events stop while it serves is a warn line naming its endpoint, counted; live again when they resume', async () => {
    await publisher.waitForSubscribers(1);
    await publisher.publish([]); // a heartbeat: the pod's events are live
    await until(() => lineOf(A, /KV events live/) !== undefined, "pod A's events live");
    const workerId = String(lineOf(A, /KV events live/)!['workerId']);
    expect(await metric('kvgate_worker_kv_events_live', { worker_id: workerId })).toBe(1);

    await pick(A);
    await until(() => lineOf(A, /KV events stale/) !== undefined, "pod A's events stale");
    expect(lineOf(A, /KV events stale/)).toMatchObject({
      level: 40,
      pod: 'pod-a',
      kvEvents: 'stale',
      msg: `endpoint ${A}: KV events stale (requests were sent, no event arrived): scored in approximate mode`,
    });
    const transitions = { worker_id: workerId };
    expect(await metric('kvgate_worker_kv_events_transitions_total', { ...transitions, to: 'stale' })).toBe(1);
    expect(await metric('kvgate_worker_kv_events_live', { worker_id: workerId })).toBe(0);

    await publisher.publish([]);
    await until(() => lineOf(A, /KV events resumed/) !== undefined, "pod A's events resumed");
    expect(lineOf(A, /KV events resumed/)).toMatchObject({ level: 30, kvEvents: 'live' });
    expect(await metric('kvgate_worker_kv_events_transitions_total', { ...transitions, to: 'live' })).toBe(2);
    expect(await metric('kvgate_worker_kv_events_live', { worker_id: workerId })).toBe(1);
  });

  it('a pod picked whose events never came is a warn line naming its endpoint and publisher, counted', async () => {
    await pick(B);
    await until(() => lineOf(B, /no KV event since it joined/) !== undefined, "pod B's silence told");
    const line = lineOf(B, /no KV event since it joined/)!;
    expect(line).toMatchObject({
      level: 40,
      pod: 'pod-b',
      kvEvents: 'silent',
      publisher: expect.stringMatching(/^tcp:\/\/127\.0\.0\.2:/),
    });
    const workerId = String(line['workerId']);
    expect(await metric('kvgate_worker_kv_events_transitions_total', { worker_id: workerId, to: 'silent' })).toBe(1);
    expect(await metric('kvgate_worker_kv_events_live', { worker_id: workerId })).toBe(0);
  });
});
