/**
 * `kvgate picker` and a request with no body on a path it does not route (a
 * client's `GET /v1/models`, a health probe through the gateway), over real
 * gRPC sockets: the test plays Envoy, `kvgate mocker` engines stand for the
 * pods, the Kubernetes API double lists them. GIE's protocol lets a picker
 * refuse a request only with 503 (no endpoint) or 429 (shed), and GIE's
 * reference picker sends such a request to a pod: kvgate's answers it with
 * the eligible endpoints (the subset's), the one with fewest requests in
 * flight first, neither scored nor booked, and passes its response on.
 */
import { status as GrpcStatus } from '@grpc/grpc-js';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startPicker, type RunningPicker } from '../../../src/picker/index.js';
import type { CliProcess } from '../../helpers/cli-process.js';
import { ExtProcClient, requestHeaders, type ExtProcStream } from '../../helpers/ext-proc-client.js';
import { KubeApiDouble } from '../../helpers/kube-api-double.js';
import { until } from '../../helpers/until.js';
import { bodyBack, immediate, picked } from './answers.js';
import { MODEL, pickerConfig } from './pool-config.js';
import { startPod } from './pod.js';

const IPS = ['127.0.0.41', '127.0.0.42'];

const pod = (name: string, ip: string) => ({
  metadata: { name, labels: { app: 'bodyless' } },
  status: { podIP: ip, conditions: [{ type: 'Ready', status: 'True' as const }] },
});

const hint = (subset: string[]) => ({ 'envoy.lb.subset_hint': { 'x-gateway-destination-endpoint-subset': subset } });

/** Sends a request's headers as Envoy does for a GET (end_of_stream: no body follows); returns the answer. */
async function get(s: ExtProcStream, path: string, subset?: string[]): Promise<Record<string, unknown>> {
  const m = requestHeaders(path, { ':method': 'GET' }, subset === undefined ? undefined : hint(subset));
  (m.request_headers as Record<string, unknown>).end_of_stream = true;
  s.send(m);
  const [answer] = await s.next(1);
  return answer!;
}

describe('kvgate picker: a request with no body on a path it does not route is passed to a pod, unbooked', () => {
  const pods: CliProcess[] = [];
  let kube: KubeApiDouble;
  let picker: RunningPicker;
  let client: ExtProcClient;
  let endpoints: string[];

  beforeAll(async () => {
    kube = await KubeApiDouble.start();
    const first = await startPod(IPS[0]!, 0);
    const port = Number(new URL(first.engine.url).port);
    pods.push(first.proc, (await startPod(IPS[1]!, port)).proc);
    endpoints = IPS.map((ip) => `${ip}:${port}`);
    kube.putPool({
      metadata: { name: 'bodyless', namespace: 'default' },
      spec: { selector: { matchLabels: { app: 'bodyless' } }, targetPorts: [{ number: port }] },
    });
    IPS.forEach((ip, i) => kube.putPod(pod(`vllm-${i}`, ip)));
    picker = await startPicker(pickerConfig(kube.url, 'bodyless'), pino({ level: 'silent' }));
    client = new ExtProcClient(picker.address);
    await until(() => Object.keys(picker.loads()).length === 2, 'both pods listed');
  }, 60_000);

  afterAll(async () => {
    client?.close();
    await picker?.stop();
    await Promise.allSettled(pods.map((p) => p.stop()));
    await kube?.close();
  });

  it("answers GET /v1/models with a pod, passes the pod's answer on, and books nothing", async () => {
    const s = client.open();
    const answer = await get(s, '/v1/models');
    const list = JSON.stringify(answer).match(/"stringValue":"([^"]+)"/)?.[1] ?? '';
    expect([...list.split(',')].sort()).toEqual([...endpoints].sort());
    expect(answer).toEqual(picked(list));
    expect(picker.bookings()).toEqual({});
    // Envoy sends it to the first endpoint; the pod's answer comes back through the picker unchanged.
    const res = await fetch(`http://${list.split(',')[0]}/v1/models`);
    expect(res.status).toBe(200);
    const text = Buffer.from(await res.arrayBuffer());
    expect(JSON.parse(text.toString())).toMatchObject({ data: [{ id: MODEL }] });
    s.send({
      response_headers: { headers: { headers: [{ key: ':status', raw_value: Buffer.from('200') }] } },
    });
    expect((await s.next(1))[0]).toEqual({ response: 'response_headers', response_headers: { response: {} } });
    s.send({ response_body: { body: text, end_of_stream: true } });
    expect(await s.next(1)).toEqual([bodyBack(text, 'response_body')]);
    s.end();
    expect(await s.status()).toEqual({ code: GrpcStatus.OK, details: 'OK' });
    expect(picker.bookings()).toEqual({});
  });

  it('names the pod with fewer requests in flight first, keeps to the subset, and answers 503 outside it', async () => {
    // A chat request held on the first pod: a GET goes to the other one first.
    const held = client.open();
    held.send(requestHeaders('/v1/chat/completions', {}, hint([endpoints[0]!])));
    const body = JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hold' }], max_tokens: 4 });
    held.send({ request_body: { body: Buffer.from(body), end_of_stream: true } });
    expect((await held.next(2))[0]).toEqual(picked(endpoints[0]!));
    for (let i = 0; i < 4; i++) {
      const s = client.open();
      expect(await get(s, '/health')).toEqual(picked(`${endpoints[1]},${endpoints[0]}`));
      s.cancel();
    }
    const s = client.open();
    expect(await get(s, '/v1/models', [endpoints[0]!])).toEqual(picked(endpoints[0]!));
    s.cancel();
    const none = client.open();
    expect(await get(none, '/v1/models', ['10.9.9.9:8000'])).toEqual(
      immediate(503, 'KVG_ERR_NO_WORKERS', 'no endpoint of the pool is ready for this request'),
    );
    expect(picker.bookings()).toEqual({ [endpoints[0]!]: 1 });
    held.cancel();
    await until(() => Object.keys(picker.bookings()).length === 0, 'the held request freed');
  });
});
