/**
 * `kvgate picker` and a request on a path it does not route (a client's
 * `GET /v1/models`, a health probe through the gateway; a POST with a body:
 * `/v1/embeddings`, an audio upload), over real gRPC sockets: the test plays
 * Envoy, `kvgate mocker` engines stand for the pods, the Kubernetes API
 * double lists them. GIE's protocol lets a picker refuse a request only with
 * 503 (no endpoint) or 429 (shed), and GIE's reference picker sends such a
 * request to a pod: kvgate's answers it with the eligible endpoints (the
 * subset's), the one with fewest requests in flight first, neither scored nor
 * booked, and passes its response on. A body is not waited for, read nor
 * held: the headers are answered at once and each chunk streamed back as it
 * comes, whatever its size or content.
 */
import { status as GrpcStatus } from '@grpc/grpc-js';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startPicker, type RunningPicker } from '../../../src/picker/index.js';
import type { CliProcess } from '../../helpers/cli-process.js';
import { ExtProcClient, requestHeaders, type ExtProcStream } from '../../helpers/ext-proc-client.js';
import { KubeApiDouble } from '../../helpers/kube-api-double.js';
import { sampleSum } from '../../helpers/metric-sum.js';
import { until } from '../../helpers/until.js';
import { bodyBack, immediate, picked } from './answers.js';
import { MODEL, pickerConfig } from './pool-config.js';
import { startPod } from './pod.js';

const IPS = ['127.0.0.41', '127.0.0.42'];
/** `limits.max_body_bytes`: the bound on a body the picker holds, which a body it passes on unread may exceed. */
const MAX_BODY = 4096;

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

/** The response Envoy reports once the request is dispatched: its headers, then its body (ending it); both passed on. */
async function respond(s: ExtProcStream, text: Buffer): Promise<void> {
  s.send({ response_headers: { headers: { headers: [{ key: ':status', raw_value: Buffer.from('200') }] } } });
  expect((await s.next(1))[0]).toEqual({ response: 'response_headers', response_headers: { response: {} } });
  s.send({ response_body: { body: text, end_of_stream: true } });
  expect(await s.next(1)).toEqual([bodyBack(text, 'response_body')]);
}

describe('kvgate picker: a request on a path it does not route is passed to a pod, unbooked', () => {
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
    const config = pickerConfig(
      kube.url,
      'bodyless',
      {},
      { admin: { enabled: true }, limits: { max_body_bytes: MAX_BODY } },
    );
    picker = await startPicker(config, pino({ level: 'silent' }));
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

  it('passes a body on a path it does not route at its headers: each chunk streamed back as it comes, unread', async () => {
    const passed = async (): Promise<number> =>
      sampleSum(await (await fetch(picker.metricsUrl!)).text(), 'kvgate_picker_requests_total', {
        model: MODEL,
        outcome: 'passed',
      });
    const before = await passed();
    const s = client.open();
    s.send(requestHeaders('/v1/embeddings'));
    // Answered before any of the body is sent: nothing waits for it.
    const [answer] = await s.next(1);
    const list = JSON.stringify(answer).match(/"stringValue":"([^"]+)"/)?.[1] ?? '';
    expect([...list.split(',')].sort()).toEqual([...endpoints].sort());
    expect(answer).toEqual(picked(list));
    const first = Buffer.from(`{"model":"${MODEL}","input":`);
    s.send({ request_body: { body: first, end_of_stream: false } });
    expect(await s.next(1)).toEqual([bodyBack(first, 'request_body', false)]);
    expect(picker.bufferedBytes()).toBe(0);
    const rest = Buffer.from('"hello"}');
    s.send({ request_body: { body: rest, end_of_stream: true } });
    expect(await s.next(1)).toEqual([bodyBack(rest)]);
    expect(picker.bookings()).toEqual({});
    await respond(s, Buffer.from('{"data":[]}'));
    s.end();
    expect(await s.status()).toEqual({ code: GrpcStatus.OK, details: 'OK' });
    expect(await passed()).toBe(before + 1);
    expect(picker.bookings()).toEqual({});
  });

  it('passes a body that is no JSON, larger than max_body_bytes and ended by trailers, to the subset it names', async () => {
    const s = client.open();
    const upload = { 'content-type': 'multipart/form-data; boundary=kvgate' };
    s.send(requestHeaders('/v1/audio/transcriptions', upload, hint([endpoints[1]!])));
    expect(await s.next(1)).toEqual([picked(endpoints[1]!)]);
    // Past max_body_bytes (MAX_BODY), in bytes that are no text: each chunk back as it was, none held.
    const chunk = Buffer.alloc(1000, 0xff);
    const chunks = Math.ceil((MAX_BODY + 1) / chunk.length);
    for (let i = 0; i < chunks; i++) s.send({ request_body: { body: chunk, end_of_stream: false } });
    expect(await s.next(chunks)).toEqual(Array.from({ length: chunks }, () => bodyBack(chunk, 'request_body', false)));
    expect(picker.bufferedBytes()).toBe(0);
    s.send({ request_trailers: {} });
    expect(await s.next(1)).toEqual([{ response: 'request_trailers', request_trailers: {} }]);
    await respond(s, Buffer.from('{"text":""}'));
    s.end();
    expect(await s.status()).toEqual({ code: GrpcStatus.OK, details: 'OK' });
    // Outside the pool: 503, and the body Envoy sent before it read the answer dropped.
    const none = client.open();
    none.send(requestHeaders('/tokenize', {}, hint(['10.9.9.9:8000'])));
    expect(await none.next(1)).toEqual([
      immediate(503, 'KVG_ERR_NO_WORKERS', 'no endpoint of the pool is ready for this request'),
    ]);
    none.send({ request_body: { body: Buffer.from('{"prompt":"x"}'), end_of_stream: true } });
    none.end();
    expect(await none.status()).toEqual({ code: GrpcStatus.OK, details: 'OK' });
    expect(none.pending).toBe(0);
    expect(picker.bookings()).toEqual({});
  });
});
