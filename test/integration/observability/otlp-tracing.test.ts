/**
 * OpenTelemetry traces of `kvgate serve` (a real gateway process over a real
 * mocker engine process): one chat request sent with a client `traceparent`
 * yields, at an OTLP/HTTP receiver run by this test, a trace that continues
 * the client's, with the request span's children (preprocessing, the routing
 * decision with its attributes, the engine leg), and the engine receives a
 * `traceparent` of the same trace, naming the engine-leg span as parent.
 * The request's log lines carry the trace id.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { jsonLines, startMockerEngine, startServe, stopServed, type ServedProc } from '../../helpers/serve-process.js';
import { startOtlpReceiver, type OtlpReceiver, type OtlpSpan } from '../../helpers/otlp-receiver.js';
import { until } from '../../helpers/until.js';

const WORKER_ID = 7;
const CLIENT_TRACE = '4bf92f3577b34da6a3ce929d0e0e4736';
const CLIENT_SPAN = '00f067aa0ba902b7';

describe('kvgate serve exports OpenTelemetry traces over OTLP/HTTP', () => {
  let dir: string;
  let receiver: OtlpReceiver;
  let received: OtlpSpan[];
  let mocker: ServedProc | undefined;
  let gateway: ServedProc | undefined;
  let url = '';

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'kvgate-otlp-'));
    receiver = await startOtlpReceiver();
    received = receiver.spans;
  });

  afterAll(async () => {
    await Promise.all([stopServed(gateway), stopServed(mocker)]);
    await receiver.close();
    rmSync(dir, { recursive: true, force: true });
  });

  // issue 17, what it must show, item 4
  it("one chat request: a trace continuing the client's, spans nested with routing attributes, and the engine got its traceparent", async () => {
    const m = await startMockerEngine(['--seed', '5']);
    mocker = m.proc;
    const engine = m.engine;
    const config = join(dir, 'kvgate.json');
    writeFileSync(
      config,
      JSON.stringify({
        listen: { host: '127.0.0.1', port: 0 },
        preprocess: { threads: 0 },
        log: { level: 'info' },
        tracing: { otlp_endpoint: receiver.url, sample_ratio: 1 },
        models: [
          {
            name: engine.model,
            block_size: 16,
            workers: [{ id: WORKER_ID, url: engine.url, kv_events: (engine.kv_events as string[])[0] }],
          },
        ],
      }),
    );
    const served = await startServe(config);
    gateway = served.proc;
    url = served.url;

    const res = await fetch(`${served.url}/v1/chat/completions`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        traceparent: `00-${CLIENT_TRACE}-${CLIENT_SPAN}-01`,
        'x-request-id': 'traced-1',
      },
      body: JSON.stringify({
        model: engine.model,
        messages: [{ role: 'user', content: 'a prompt long enough to fill a block or two of tokens for the engine' }],
        max_tokens: 4,
      }),
    });
    expect(res.status).toBe(200);
    await res.arrayBuffer();

    const byName = (name: string): OtlpSpan | undefined =>
      received.find((s) => s.traceId === CLIENT_TRACE && s.name === name);
    await until(
      () =>
        ['kvgate.request', 'kvgate.preprocess', 'kvgate.route', 'kvgate.engine.aggregated'].every(
          (n) => byName(n) !== undefined,
        ),
      "the request's spans at the OTLP receiver",
      20_000,
    );
    const root = byName('kvgate.request')!;
    const pre = byName('kvgate.preprocess')!;
    const route = byName('kvgate.route')!;
    const leg = byName('kvgate.engine.aggregated')!;
    // The client's trace continues: the request span's parent is the client's span.
    expect(root.parentSpanId).toBe(CLIENT_SPAN);
    expect(root.attributes['http.response.status_code']).toBe(200);
    for (const child of [pre, route, leg]) expect(child.parentSpanId).toBe(root.spanId);
    expect(route.attributes).toMatchObject({
      'kvgate.worker_id': WORKER_ID,
      'kvgate.dp_rank': 0,
      'kvgate.worker_type': 'aggregated',
      'kvgate.route.mode': 'book',
    });
    for (const key of [
      'kvgate.overlap_blocks',
      'kvgate.max_overlap_blocks',
      'kvgate.required_blocks',
      'kvgate.cost',
      'kvgate.cost.prefill_tokens',
      'kvgate.cost.decode_blocks',
    ]) {
      expect(typeof route.attributes[key], key).toBe('number');
    }
    expect(leg.attributes).toMatchObject({ 'kvgate.worker_id': WORKER_ID, 'kvgate.phase': 'aggregated' });
    // An aggregated model's pool is on the decode side of the router, yet the decision names what it served.
    expect(route.attributes['kvgate.pool']).toBe('aggregated');

    // The engine received a traceparent of the same trace, whose parent is the engine-leg span.
    const state = (await (await fetch(`${String(engine.url)}/admin/state`)).json()) as { traceparents: string[] };
    expect(state.traceparents).toContain(`00-${CLIENT_TRACE}-${leg.spanId}-01`);

    // The request's log line carries the trace id.
    const access = jsonLines(gateway).find((o) => o.msg === 'request' && o.reqId === 'traced-1');
    expect(access?.traceId).toBe(CLIENT_TRACE);
  }, 60_000);
  it('probes and scrapes are not traced unless the caller sends a trace; the requests after them are', async () => {
    expect(url).not.toBe('');
    for (let i = 0; i < 3; i++)
      for (const path of ['/health', '/ready', '/metrics', '/metrics?name[]=x'])
        await (await fetch(`${url}${path}`)).arrayBuffer();
    const probeTrace = 'aaaabbbbccccddddeeeeffff00001111';
    await (
      await fetch(`${url}/health`, { headers: { traceparent: `00-${probeTrace}-${CLIENT_SPAN}-01` } })
    ).arrayBuffer();
    // A request after the probes: once its span is at the receiver, the probes' spans would be too (ended before it).
    const lastTrace = '99998888777766665555444433332222';
    await (
      await fetch(`${url}/v1/models`, { headers: { traceparent: `00-${lastTrace}-${CLIENT_SPAN}-01` } })
    ).arrayBuffer();
    await (await fetch(`${url}/v1/models`)).arrayBuffer();
    await until(
      () =>
        received.filter((s) => s.name === 'kvgate.request' && s.attributes['url.path'] === '/v1/models').length === 2,
      'the two /v1/models request spans at the receiver',
      20_000,
    );
    const paths = received.filter((s) => s.name === 'kvgate.request').map((s) => [s.traceId, s.attributes['url.path']]);
    expect(paths.filter(([, p]) => p !== '/v1/chat/completions' && p !== '/v1/models')).toEqual([
      [probeTrace, '/health'],
    ]);
  }, 30_000);
});
