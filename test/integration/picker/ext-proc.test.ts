/**
 * `kvgate picker` as a Gateway API Inference Extension endpoint picker, over
 * real gRPC sockets: the test plays Envoy (no Envoy, and no Kubernetes
 * cluster, can run here), sending the ext_proc messages Envoy sends in
 * streamed mode from a client built from the vendored protos, and forwarding
 * each request to the endpoint picked, a real `kvgate mocker` engine standing
 * for a pod. The pods and the InferencePool come from the Kubernetes API
 * double (list + watch over HTTP). Every scenario asserts the exact answers:
 * the pick (header and `envoy.lb` metadata, the fallback list), stickiness,
 * the subset hint, the conformance hooks, shedding (429), none ready (503),
 * the served-endpoint readback after a fallback, bodies ended by trailers, a
 * stream reset mid-request (booking freed), and malformed or out-of-order messages (a gRPC error,
 * nothing left booked).
 */
import { status as GrpcStatus } from '@grpc/grpc-js';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startPicker, type RunningPicker } from '../../../src/picker/index.js';
import type { CliProcess, MockerLine } from '../../helpers/cli-process.js';
import { ExtProcClient, requestHeaders, structs, type ExtProcStream } from '../../helpers/ext-proc-client.js';
import { KubeApiDouble, type Pod } from '../../helpers/kube-api-double.js';
import { until } from '../../helpers/until.js';
import { bodyBack, immediate, picked } from './answers.js';
import { MODEL, pickerConfig } from './pool-config.js';
import { startPod } from './pod.js';

const IPS = ['127.0.0.11', '127.0.0.12', '127.0.0.13'];
const CHAT = '/v1/chat/completions';

const pod = (name: string, ip: string, ready = true): Pod => ({
  metadata: { name, labels: { app: 'vllm' } },
  status: { podIP: ip, conditions: [{ type: 'Ready', status: ready ? 'True' : 'False' }] },
});

function chatBody(content: string, extra: Record<string, unknown> = {}): Buffer {
  return Buffer.from(
    JSON.stringify({ model: MODEL, messages: [{ role: 'user', content }], max_tokens: 4, stream: true, ...extra }),
  );
}

/** Sends a request's headers and body as Envoy does; returns the two answers (the pick and the body). */
async function sendRequest(
  s: ExtProcStream,
  body: Buffer,
  extra: Record<string, string> = {},
  metadata?: Record<string, Record<string, unknown>>,
): Promise<Record<string, unknown>[]> {
  s.send(requestHeaders(CHAT, extra, metadata));
  s.send({ request_body: { body: body.subarray(0, 10), end_of_stream: false } });
  s.send({ request_body: { body: body.subarray(10), end_of_stream: true } });
  const [first] = await s.next(1);
  if (first!.response === 'immediate_response') return [first!];
  return [first!, ...(await s.next(1))];
}

const listOf = (answer: Record<string, unknown>): string =>
  (
    answer.request_headers as { response: { header_mutation: { set_headers: { header: { raw_value: Buffer } }[] } } }
  ).response.header_mutation.set_headers[0]!.header.raw_value.toString();

/**
 * Envoy's part after the pick: the request sent to `endpoint`, its answer streamed back through the picker; with
 * `trailers`, the response ends with its trailers (no chunk ends the stream), their answer last.
 */
async function serveOn(
  s: ExtProcStream,
  endpoint: string,
  body: Buffer,
  trailers = false,
): Promise<Record<string, unknown>[]> {
  const res = await fetch(`http://${endpoint}${CHAT}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body,
  });
  expect(res.status).toBe(200);
  s.send({
    response_headers: {
      headers: { headers: [{ key: ':status', raw_value: Buffer.from('200') }] },
      end_of_stream: false,
    },
    metadata_context: {
      filter_metadata: structs({ 'envoy.lb': { 'x-gateway-destination-endpoint-served': endpoint } }),
    },
  });
  const answers = await s.next(1);
  const chunks: Buffer[] = [];
  for await (const chunk of res.body!) chunks.push(Buffer.from(chunk as Uint8Array));
  chunks.forEach((c, i) => s.send({ response_body: { body: c, end_of_stream: !trailers && i === chunks.length - 1 } }));
  if (trailers)
    s.send({ response_trailers: { trailers: { headers: [{ key: 'x-done', raw_value: Buffer.from('1') }] } } });
  answers.push(...(await s.next(chunks.length + (trailers ? 1 : 0))));
  return answers.map((a, i) => (i === 0 || i > chunks.length ? a : { ...a, chunk: chunks[i - 1] }));
}

describe('kvgate picker: the endpoint-picker protocol over ext_proc (the test plays Envoy; no cluster, no Envoy)', () => {
  const pods: { proc: CliProcess; engine: MockerLine }[] = [];
  const pickers: RunningPicker[] = [];
  let kube: KubeApiDouble;
  let endpoints: string[];
  let main: { picker: RunningPicker; client: ExtProcClient };
  const logger = pino({ level: 'silent' });

  /** A picker of `pool`, the GIE conformance hooks on unless `hooks` is false (they are off by default). */
  async function picker(
    pool: string,
    router: Record<string, unknown> = {},
    hooks = true,
  ): Promise<{ picker: RunningPicker; client: ExtProcClient }> {
    const config = pickerConfig(kube.url, pool, router, {}, hooks ? { conformance_hooks: true } : {});
    const p = await startPicker(config, logger);
    pickers.push(p);
    return { picker: p, client: new ExtProcClient(p.address) };
  }

  beforeAll(async () => {
    kube = await KubeApiDouble.start();
    const first = await startPod(IPS[0]!, 0);
    const port = Number(new URL(first.engine.url).port);
    pods.push(first, ...(await Promise.all(IPS.slice(1).map((ip) => startPod(ip, port)))));
    endpoints = IPS.map((ip) => `${ip}:${port}`);
    IPS.forEach((ip, i) => kube.putPod(pod(`vllm-${i}`, ip)));
    kube.putPod({ ...pod('other', '127.0.0.99'), metadata: { name: 'other', labels: { app: 'other' } } });
    for (const [name, port2] of [
      ['pool-a', port],
      ['pool-b', port],
      ['pool-none', port],
    ] as const)
      kube.putPool({
        metadata: { name, namespace: 'default' },
        spec: {
          selector: { matchLabels: { app: name === 'pool-none' ? 'none' : 'vllm' } },
          targetPorts: [{ number: port2 }],
        },
      });
    main = await picker('pool-a');
    await until(async () => (await main.client.check('readiness')) === 'SERVING', 'the picker ready');
  }, 60_000);

  afterAll(async () => {
    for (const p of pickers) await p.stop();
    await Promise.allSettled(pods.map((p) => p.proc.stop()));
    await kube?.close();
  });

  it('answers gRPC health: liveness, readiness and the ext_proc service SERVING; an unknown service NOT_FOUND', async () => {
    expect(await main.client.check('liveness')).toBe('SERVING');
    expect(await main.client.check('readiness')).toBe('SERVING');
    expect(await main.client.check('envoy.service.ext_proc.v3.ExternalProcessor')).toBe('SERVING');
    expect(await main.client.check('')).toBe('SERVING');
    expect(await main.client.check('nope')).toBe(GrpcStatus.NOT_FOUND);
  });

  it('picks a ready pod of the pool with the next best as fallbacks, streams both bodies, and frees the booking at the end', async () => {
    const s = main.client.open();
    const body = chatBody('The first question of a long conversation about routing. '.repeat(20));
    const [pick, back] = await sendRequest(s, body);
    const list = listOf(pick!).split(',');
    // The pick and two fallbacks: every ready pod of the selector once, never the pod the selector leaves out.
    expect([...list].sort()).toEqual([...endpoints].sort());
    expect(pick).toEqual(picked(list.join(',')));
    expect(back).toEqual(bodyBack(body));
    expect(main.picker.bookings()).toEqual({ [list[0]!]: 1 });
    // The body is passed on: the stream holds none of it while its response runs.
    expect(main.picker.bufferedBytes()).toBe(0);
    const answers = await serveOn(s, list[0]!, body);
    expect(answers[0]).toEqual({
      response: 'response_headers',
      response_headers: {
        response: {
          header_mutation: {
            set_headers: [{ header: { key: 'x-conformance-test-served-endpoint', raw_value: Buffer.from(list[0]!) } }],
          },
        },
      },
    });
    for (const [i, a] of answers.slice(1).entries()) {
      const { chunk, ...answer } = a as { chunk: Buffer };
      expect(answer).toEqual({
        response: 'response_body',
        response_body: {
          response: {
            body_mutation: {
              mutation: 'streamed_response',
              streamed_response: { body: chunk, end_of_stream: i === answers.length - 2 },
            },
          },
        },
      });
    }
    expect(main.picker.bookings()).toEqual({});
    s.end();
    expect(await s.status()).toEqual({ code: GrpcStatus.OK, details: 'OK' });

    // The same conversation, one turn on: the pod that holds its prefix again (KV-aware and sticky).
    const s2 = main.client.open();
    const next = chatBody('The first question of a long conversation about routing. '.repeat(20) + 'And a follow-up.');
    const [pick2] = await sendRequest(s2, next);
    expect(listOf(pick2!).split(',')[0]).toBe(list[0]);
    s2.cancel();
    await until(() => Object.keys(main.picker.bookings()).length === 0, 'the reset stream freed');
  });

  it('honours the subset hint in the filter metadata, and answers 503 when none of it is eligible', async () => {
    const s = main.client.open();
    const body = chatBody('subset');
    const hint = { 'envoy.lb.subset_hint': { 'x-gateway-destination-endpoint-subset': [endpoints[2]!] } };
    const [pick] = await sendRequest(s, body, {}, hint);
    expect(pick).toEqual(picked(endpoints[2]!));
    s.cancel();
    const s2 = main.client.open();
    const outside = { 'envoy.lb.subset_hint': { 'x-gateway-destination-endpoint-subset': ['10.9.9.9:8000'] } };
    expect(await sendRequest(s2, body, {}, outside)).toEqual([
      immediate(503, 'KVG_ERR_NO_WORKERS', 'no endpoint of the pool is ready for this request'),
    ]);
    await until(() => Object.keys(main.picker.bookings()).length === 0, 'nothing booked');
  });

  it("honours the conformance harness's test-epp-endpoint-selection header", async () => {
    const s = main.client.open();
    const [pick] = await sendRequest(s, chatBody('conformance'), { 'test-epp-endpoint-selection': IPS[1]! });
    expect(pick).toEqual(picked(endpoints[1]!));
    s.cancel();
    await until(() => Object.keys(main.picker.bookings()).length === 0, 'the reset stream freed');
  });

  it('ignores the conformance hooks unless inference_pool.conformance_hooks: no client picks its own pod', async () => {
    const plain = await picker('pool-a', {}, false);
    await until(async () => (await plain.client.check('readiness')) === 'SERVING', 'the plain picker ready');
    const s = plain.client.open();
    const body = chatBody('a client that names its own pod');
    const [pick] = await sendRequest(s, body, { 'test-epp-endpoint-selection': IPS[1]! });
    // Scored among every ready pod (the pick and two fallbacks), not held to the one the header names.
    const list = listOf(pick!).split(',');
    expect([...list].sort()).toEqual([...endpoints].sort());
    const answers = await serveOn(s, list[0]!, body);
    // No echo of the served endpoint either.
    expect(answers[0]).toEqual({ response: 'response_headers', response_headers: { response: {} } });
    s.end();
    await until(() => Object.keys(plain.picker.bookings()).length === 0, 'freed');
    plain.client.close();
  });

  it('moves the booking to the endpoint that really served (a fallback) and echoes it for the conformance harness', async () => {
    const s = main.client.open();
    const body = chatBody('readback after a fallback');
    const [pick] = await sendRequest(s, body);
    const list = listOf(pick!).split(',');
    expect(main.picker.bookings()).toEqual({ [list[0]!]: 1 });
    // Envoy's first try failed: it went down the list to the second endpoint.
    const res = await fetch(`http://${list[1]}${CHAT}`, {
      method: 'POST',
      body,
      headers: { 'content-type': 'application/json' },
    });
    s.send({
      response_headers: {
        headers: { headers: [{ key: ':status', raw_value: Buffer.from('200') }] },
        end_of_stream: false,
      },
      metadata_context: {
        filter_metadata: structs({ 'envoy.lb': { 'x-gateway-destination-endpoint-served': list[1]! } }),
      },
    });
    expect((await s.next(1))[0]).toEqual({
      response: 'response_headers',
      response_headers: {
        response: {
          header_mutation: {
            set_headers: [{ header: { key: 'x-conformance-test-served-endpoint', raw_value: Buffer.from(list[1]!) } }],
          },
        },
      },
    });
    expect(main.picker.bookings()).toEqual({ [list[1]!]: 1 });
    const text = Buffer.from(await res.arrayBuffer());
    s.send({ response_body: { body: text, end_of_stream: true } });
    expect(await s.next(1)).toEqual([bodyBack(text, 'response_body')]);
    expect(main.picker.bookings()).toEqual({});
    s.end();
  });

  it('takes trailers as the end of a body (Envoy sends them: FULL_DUPLEX_STREAMED needs trailer mode SEND)', async () => {
    const s = main.client.open();
    const body = chatBody('a request and a response that both end with trailers');
    s.send(requestHeaders(CHAT));
    s.send({ request_body: { body: body.subarray(0, 10), end_of_stream: false } });
    s.send({ request_body: { body: body.subarray(10), end_of_stream: false } });
    s.send({ request_trailers: { trailers: { headers: [{ key: 'x-sum', raw_value: Buffer.from('1') }] } } });
    // The pick, the body passed on without ending the stream (the trailers do), then the trailers' answer.
    const [pick, back, trailers] = await s.next(3);
    const list = listOf(pick!).split(',');
    expect(pick).toEqual(picked(list.join(',')));
    expect(back).toEqual(bodyBack(body, 'request_body', false));
    expect(trailers).toEqual({ response: 'request_trailers', request_trailers: {} });
    expect(main.picker.bookings()).toEqual({ [list[0]!]: 1 });
    const answers = await serveOn(s, list[0]!, body, true);
    expect(answers.at(-1)).toEqual({ response: 'response_trailers', response_trailers: {} });
    for (const a of answers.slice(1, -1))
      expect(a).toMatchObject({
        response_body: { response: { body_mutation: { streamed_response: { end_of_stream: false } } } },
      });
    // The response's trailers ended it: the booking is freed before the stream ends.
    expect(main.picker.bookings()).toEqual({});
    s.end();
    expect(await s.status()).toEqual({ code: GrpcStatus.OK, details: 'OK' });
  });

  it('frees the booking of a stream reset mid-request, and the body of one reset mid-body', async () => {
    const s = main.client.open();
    const [pick] = await sendRequest(s, chatBody('reset me'));
    expect(main.picker.bookings()).toEqual({ [listOf(pick!).split(',')[0]!]: 1 });
    s.cancel();
    await until(() => Object.keys(main.picker.bookings()).length === 0, 'the booking freed');
    // A stream reset mid-body: what it buffered goes with it.
    const partial = main.client.open();
    partial.send(requestHeaders(CHAT));
    partial.send({ request_body: { body: Buffer.from('{"model":'), end_of_stream: false } });
    await until(() => main.picker.bufferedBytes() === 9, 'the first chunk buffered');
    partial.cancel();
    await until(() => main.picker.bufferedBytes() === 0, 'the reset stream forgotten');
  });

  it('refuses malformed and out-of-order messages with a gRPC error, leaving nothing booked', async () => {
    const cases: [Record<string, unknown>[], number, string][] = [
      [
        [{ response_headers: { end_of_stream: false } }],
        GrpcStatus.FAILED_PRECONDITION,
        'response_headers out of order (the stream is at start)',
      ],
      [
        [{ request_body: { body: Buffer.from('{}'), end_of_stream: true } }],
        GrpcStatus.FAILED_PRECONDITION,
        'request_body out of order (the stream is at start)',
      ],
      [[{}], GrpcStatus.INVALID_ARGUMENT, 'a ProcessingRequest with no request member'],
      [
        [requestHeaders(CHAT), requestHeaders(CHAT)],
        GrpcStatus.FAILED_PRECONDITION,
        'request_headers out of order (the stream is at request_body)',
      ],
      [
        [{ request_trailers: {} }],
        GrpcStatus.FAILED_PRECONDITION,
        'request_trailers out of order (the stream is at start)',
      ],
    ];
    for (const [messages, code, details] of cases) {
      const s = main.client.open();
      for (const m of messages) s.send(m);
      expect(await s.status()).toEqual({ code, details });
      expect(s.pending).toBe(0);
    }
    // A body that is not a chat request: the client gets the gateway's 400, nothing is picked.
    const s = main.client.open();
    expect(await sendRequest(s, Buffer.from('{"model": "mock-model", "messages": 3}'))).toEqual([
      immediate(400, 'KVG_ERR_INVALID_REQUEST', 'messages must be array', 'messages'),
    ]);
    s.end();
    expect(main.picker.bookings()).toEqual({});
  });

  it('answers an inference request with no body, or one over max_body_bytes, with an ImmediateResponse (400, 413)', async () => {
    {
      const s = main.client.open();
      const headers = requestHeaders(CHAT).request_headers as Record<string, unknown>;
      s.send({ request_headers: { ...headers, end_of_stream: true } });
      const message = 'the request has no body; kvgate routes requests with a JSON body';
      expect(await s.next(1)).toEqual([immediate(400, 'KVG_ERR_INVALID_REQUEST', message)]);
      s.end();
      expect(await s.status()).toEqual({ code: GrpcStatus.OK, details: 'OK' });
    }
    // 4 MiB (the default limit) in 64 KiB chunks, then one more: refused at once, the chunks and trailers Envoy sent
    // before it read the answer dropped (no gRPC error), nothing booked.
    const s = main.client.open();
    s.send(requestHeaders(CHAT));
    const chunk = Buffer.alloc(64 * 1024, 0x20);
    for (let i = 0; i <= 64; i++) s.send({ request_body: { body: chunk, end_of_stream: false } });
    expect(await s.next(1)).toEqual([
      immediate(413, 'KVG_ERR_BODY_TOO_LARGE', 'the request body is larger than the limit of 4194304 bytes'),
    ]);
    s.send({ request_body: { body: chunk, end_of_stream: false } });
    s.send({ request_trailers: {} });
    s.end();
    expect(await s.status()).toEqual({ code: GrpcStatus.OK, details: 'OK' });
    expect(s.pending).toBe(0);
    expect(main.picker.bookings()).toEqual({});
  });

  it('answers 503 when the pool has no ready pod, and 429 when the pod it may use is too busy (shed)', async () => {
    const none = await picker('pool-none');
    await until(async () => (await none.client.check('readiness')) === 'SERVING', 'the empty pool listed');
    const s = none.client.open();
    expect(await sendRequest(s, chatBody('anyone?'))).toEqual([
      immediate(503, 'KVG_ERR_NO_WORKERS', 'no endpoint of the pool is ready for this request'),
    ]);
    none.client.close();

    const busy = await picker('pool-b', { active_prefill_tokens_threshold: 1 });
    await until(async () => (await busy.client.check('readiness')) === 'SERVING', 'pool-b listed');
    const only = { 'test-epp-endpoint-selection': IPS[0]! };
    const held = busy.client.open();
    const [pick] = await sendRequest(
      held,
      chatBody('a long prompt that keeps the pod busy while it is prefilled'),
      only,
    );
    expect(pick).toEqual(picked(endpoints[0]!));
    const shed = busy.client.open();
    const shedAnswer = immediate(
      429,
      'KVG_ERR_TOO_MANY_REQUESTS',
      'the request was shed: all 1 eligible worker ranks are overloaded',
    );
    expect(await sendRequest(shed, chatBody('one more'), only)).toEqual([shedAnswer]);
    // The pod turns NotReady and Ready again while the held request runs on: it comes back with that load.
    const another = async (): Promise<Record<string, unknown>> => {
      const s = busy.client.open();
      const [first] = await sendRequest(s, chatBody('one more'), only);
      s.cancel();
      return first!;
    };
    const gone = (a: Record<string, unknown>): boolean => JSON.stringify(a).includes('KVG_ERR_NO_WORKERS');
    kube.putPod(pod('vllm-0', IPS[0]!, false));
    await until(async () => gone(await another()), 'the pod gone from the picker');
    kube.putPod(pod('vllm-0', IPS[0]!));
    let back: Record<string, unknown> = {};
    await until(async () => !gone((back = await another())), 'the pod back in the picker');
    expect(back).toEqual(shedAnswer);
    held.cancel();
    await until(() => Object.keys(busy.picker.bookings()).length === 0, 'the held booking freed');
    busy.client.close();
  });
});
