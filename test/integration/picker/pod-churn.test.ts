/**
 * Pod churn leaves nothing behind: 1,000 pods come and go through an InferencePool (listed by the Kubernetes API
 * double, ten at a time, their IPs reused as a cluster reuses them), each with a new worker id, each subscribed
 * to its KV events (a test ZMQ publisher on every pod IP) and sent a batch (blocks of the model's block size, and
 * one of another: a warn line per pod), and picked among once a wave (the test plays Envoy over real gRPC; no engine runs). What
 * the picker keeps per pod (`footprint`: its maps, the router's workers and index slots, the subscriptions, their
 * liveness and counters) is after the thousandth pod what ten pods hold, and only the pods listed now have
 * series.
 */
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startPicker, type RunningPicker } from '../../../src/picker/index.js';
import { ExtProcClient, requestHeaders } from '../../helpers/ext-proc-client.js';
import { KubeApiDouble } from '../../helpers/kube-api-double.js';
import { until } from '../../helpers/until.js';
import { TestKvPublisher, type TestEvent } from '../../helpers/zmq-publisher.js';
import { MODEL, pickerConfig } from './pool-config.js';

const WAVE = 10;
const PODS = 1000;
const IPS = Array.from({ length: WAVE }, (_, i) => `127.0.1.${i + 1}`);
const CHAT = '/v1/chat/completions';

describe('kvgate picker: 1,000 pods coming and going (the test plays Envoy; no cluster, no Envoy)', () => {
  let kube: KubeApiDouble;
  let publisher: TestKvPublisher;
  let picker: RunningPicker;
  let client: ExtProcClient;
  const logs: Record<string, unknown>[] = [];

  const pick = async (): Promise<void> => {
    const s = client.open();
    s.send(requestHeaders(CHAT));
    const body = JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hello' }], max_tokens: 2 });
    s.send({ request_body: { body: Buffer.from(body), end_of_stream: true } });
    await s.next(1);
    s.cancel();
  };
  const stored = (hash: bigint, blockSize: number): TestEvent => ({
    type: 'stored',
    blockHashes: [hash],
    parent: null,
    tokens: Array.from({ length: blockSize }, (_, i) => i + 1),
    blockSize,
  });
  const mismatches = (): number => logs.filter((l) => /block size other than/.test(String(l['msg']))).length;

  beforeAll(async () => {
    kube = await KubeApiDouble.start();
    publisher = await TestKvPublisher.start({ hosts: IPS, replay: false });
    kube.putPool({
      metadata: { name: 'pool', namespace: 'default' },
      spec: { selector: { matchLabels: { app: 'vllm' } }, targetPorts: [{ number: 8000 }] },
    });
    const config = pickerConfig(kube.url, 'pool', { use_kv_events: true }, { admin: { enabled: true } });
    const sink = { write: (line: string): void => void logs.push(JSON.parse(line) as Record<string, unknown>) };
    picker = await startPicker(config, pino({ level: 'warn' }, sink));
    client = new ExtProcClient(picker.address);
  }, 30_000);

  afterAll(async () => {
    client?.close();
    await picker?.stop();
    await publisher?.close();
    await kube?.close();
  });

  it("keeps per pod only what the pods listed now hold; a gone pod's worker id leaves nothing", async () => {
    const kvPort = publisher.endpoint.slice(publisher.endpoint.lastIndexOf(':') + 1);
    for (let wave = 0; wave < PODS / WAVE; wave++) {
      for (let i = 0; i < WAVE; i++) if (wave > 0) kube.deletePod(`pod-${(wave - 1) * WAVE + i}`);
      for (const [i, ip] of IPS.entries())
        kube.putPod({
          metadata: {
            name: `pod-${wave * WAVE + i}`,
            labels: { app: 'vllm' },
            annotations: { 'kvgate.io/kv-events-port': kvPort },
          },
          status: { podIP: ip, conditions: [{ type: 'Ready', status: 'True' }] },
        });
      await until(() => picker.footprint()['subscriptions'] === WAVE, `wave ${wave} subscribed`);
      // Each new pod's first batch is a warn line (its block size of 32); ZMQ drops what is sent before a
      // subscriber has joined, so the batch goes again until every pod of the wave has had it.
      const seen = (wave + 1) * WAVE;
      for (let n = 0; mismatches() < seen; n++) {
        if (n > 100) throw new Error(`wave ${wave}: ${mismatches()} of ${seen} pods had a batch`);
        await publisher.publish([stored(BigInt(n + 1), 16), stored(BigInt(n + 1000), 32)]);
        await until(() => mismatches() >= seen, 'the batch', 100).catch(() => undefined);
      }
      await pick();
      await until(() => picker.footprint()['bookings'] === 0, 'the booking freed');
    }
    // The liveness watch keeps a state per pod it ticked (every second): the pods listed now, once ticked.
    await until(() => picker.footprint()['kvEventStates'] === WAVE, 'the listed pods ticked');
    const kept = picker.footprint();
    expect(Object.entries(kept).filter(([, n]) => n > WAVE)).toEqual([]);
    expect(kept).toMatchObject({
      endpoints: WAVE,
      routerWorkers: WAVE,
      indexSlots: WAVE,
      subscriptions: WAVE,
      livenessSlots: WAVE,
      eventCounterSlots: WAVE,
      blockSizeWarned: WAVE,
      bookings: 0,
    });
    // Series go with a pod once its subscription is stopped.
    const workerIds = async (): Promise<string[]> => [
      ...new Set(
        [...(await (await fetch(picker.metricsUrl!)).text()).matchAll(/worker_id="(\d+)"/g)].map((m) => m[1]!),
      ),
    ];
    await until(async () => (await workerIds()).length <= WAVE, 'only the listed pods with series');
    expect((await workerIds()).map(Number).every((id) => id > PODS - WAVE)).toBe(true);
  }, 120_000);
});
