/**
 * `kvgate picker` subscribes to its pods' KV events, as the gateway does to its workers': two `kvgate mocker`
 * engines stand for the pods of an InferencePool (listed by the Kubernetes API double; no cluster or Envoy runs
 * here, the test plays Envoy over real gRPC), one naming its ZMQ publisher by the `kvgate.io/kv-events-port`
 * annotation, the other by a container port named `kv-events`. Each engine is sent a long document directly,
 * past the picker, so the picker cannot know where it is from its own choices: only the engines' KV events
 * tell it. A request sharing a document's prefix is then picked onto the pod that holds it, for both pods.
 * A third pod's annotation is not a port: it is still an endpoint, scored approximately, and a warn line says why.
 */
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadGatewayConfig } from '../../../src/config/index.js';
import { startPicker, type RunningPicker } from '../../../src/picker/index.js';
import type { CliProcess, MockerLine } from '../../helpers/cli-process.js';
import { ExtProcClient, requestHeaders } from '../../helpers/ext-proc-client.js';
import { KubeApiDouble, type Pod } from '../../helpers/kube-api-double.js';
import { sampleSum } from '../../helpers/metric-sum.js';
import { until } from '../../helpers/until.js';
import { doc, startPod, untilSubscribed } from './pod.js';

const MODEL = 'mock-model';
const IPS = ['127.0.0.31', '127.0.0.32'];
const BAD_IP = '127.0.0.33';
const CHAT = '/v1/chat/completions';

const body = (content: string): string =>
  JSON.stringify({ model: MODEL, messages: [{ role: 'user', content }], max_tokens: 2 });

describe("kvgate picker: its pods' KV events (the test plays Envoy; no cluster, no Envoy)", () => {
  const pods: { proc: CliProcess; engine: MockerLine }[] = [];
  let kube: KubeApiDouble;
  let picker: RunningPicker;
  let client: ExtProcClient;
  let endpoints: string[];
  const logs: Record<string, unknown>[] = [];

  const applied = async (): Promise<number> =>
    sampleSum(await (await fetch(picker.metricsUrl!)).text(), 'kvgate_kv_events_applied_total', {
      event_type: 'stored',
      status: 'ok',
    });
  /** Sends `content` straight to the engine at `endpoint`, past the picker. */
  const direct = async (endpoint: string, content: string): Promise<void> => {
    const res = await fetch(`http://${endpoint}${CHAT}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: body(content),
    });
    expect(res.status).toBe(200);
    await res.arrayBuffer();
  };
  /** The endpoints the picker answers for `content` (the pick first); the stream is then reset (booking freed). */
  const pick = async (content: string): Promise<string[]> => {
    const s = client.open();
    const b = Buffer.from(body(content));
    s.send(requestHeaders(CHAT));
    s.send({ request_body: { body: b, end_of_stream: true } });
    const [answer] = await s.next(1);
    s.cancel();
    const headers = (
      answer as {
        request_headers: { response: { header_mutation: { set_headers: { header: { raw_value: Buffer } }[] } } };
      }
    ).request_headers.response.header_mutation.set_headers;
    return headers[0]!.header.raw_value.toString().split(',');
  };

  beforeAll(async () => {
    kube = await KubeApiDouble.start();
    const first = await startPod(IPS[0]!, 0);
    const port = Number(new URL(first.engine.url).port);
    pods.push(first, await startPod(IPS[1]!, port));
    endpoints = IPS.map((ip) => `${ip}:${port}`);
    const kvPort = (i: number): number => Number(new URL(pods[i]!.engine.kv_events[0]!.replace('tcp:', 'http:')).port);
    const base = (i: number): Pod => ({
      metadata: { name: `vllm-${i}`, labels: { app: 'vllm' } },
      status: { podIP: IPS[i]!, conditions: [{ type: 'Ready', status: 'True' }] },
    });
    // Pod 0 names its publisher by annotation, pod 1 by its container port's name.
    kube.putPod({
      ...base(0),
      metadata: { ...base(0).metadata, annotations: { 'kvgate.io/kv-events-port': `${kvPort(0)}` } },
    });
    kube.putPod({
      ...base(1),
      spec: {
        containers: [
          { name: 'vllm', ports: [{ containerPort: port }, { name: 'kv-events', containerPort: kvPort(1) }] },
        ],
      },
    });
    kube.putPod({
      metadata: { name: 'vllm-bad', labels: { app: 'vllm' }, annotations: { 'kvgate.io/kv-events-port': 'zmq' } },
      status: { podIP: BAD_IP, conditions: [{ type: 'Ready', status: 'True' }] },
    });
    kube.putPool({
      metadata: { name: 'pool', namespace: 'default' },
      spec: { selector: { matchLabels: { app: 'vllm' } }, targetPorts: [{ number: port }] },
    });
    const config = loadGatewayConfig({
      env: {},
      base: {
        listen: { host: '127.0.0.1', port: 0 },
        admin: { enabled: true },
        preprocess: { threads: 0 },
        models: [
          {
            name: MODEL,
            tokenizer: 'demo',
            inference_pool: { api_server: kube.url, name: 'pool', token_file: '/nonexistent', ca_file: '/nonexistent' },
          },
        ],
      },
    });
    const sink = { write: (line: string): void => void logs.push(JSON.parse(line) as Record<string, unknown>) };
    picker = await startPicker(config, pino({ level: 'info' }, sink));
    client = new ExtProcClient(picker.address);
    await until(async () => (await client.check('readiness')) === 'SERVING', 'the picker ready');
  }, 60_000);

  afterAll(async () => {
    client?.close();
    await picker?.stop();
    await Promise.allSettled(pods.map((p) => p.proc.stop()));
    await kube?.close();
  });

  it('picks the pod whose KV events say it holds the prefix, for a prefix it never routed', async () => {
    await untilSubscribed(endpoints.length, (i, d) => direct(endpoints[i]!, d), applied);
    for (const [i, endpoint] of endpoints.entries()) {
      const before = await applied();
      await direct(endpoint, doc(`doc${i}`));
      await until(async () => (await applied()) > before, `the document on ${endpoint} indexed`);
    }
    for (const [i, endpoint] of endpoints.entries()) {
      for (let turn = 0; turn < 3; turn++) {
        const list = await pick(`${doc(`doc${i}`)} and then question ${turn}`);
        expect(list[0]).toBe(endpoint);
      }
    }
    await until(async () => Object.keys(picker.bookings()).length === 0, 'every booking freed');
  }, 60_000);

  it('keeps a pod whose KV-event annotation is not a port as an endpoint, scored approximately, and says so', async () => {
    const list = await pick('a short question');
    expect([...list].sort()).toEqual([...endpoints, `${BAD_IP}:${endpoints[0]!.split(':')[1]}`].sort());
    expect(logs).toContainEqual(
      expect.objectContaining({
        level: 40,
        pod: 'vllm-bad',
        value: 'zmq',
        msg: 'pod vllm-bad: kvgate.io/kv-events-port is not a port number; its KV events are not subscribed',
      }),
    );
  });
});
