/**
 * W3C trace context through `kvgate serve` (a real gateway process) to real `kvgate mocker` engines, on every
 * inference API: a client's `traceparent` and `tracestate` are continued by the request's server span, and each
 * engine leg's request carries a `traceparent` naming that leg's own client span (and the client's `tracestate`):
 * chat and text completions, the Messages and Responses APIs, embeddings, and both legs of a disaggregated
 * request. The spans are read at an OTLP/HTTP (JSON) receiver run by this test (test/helpers/otlp-receiver.ts, a
 * double that speaks the protocol); the mockers record the trace headers each inference request carried.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startMockerCli, type MockerLine } from '../../helpers/cli-process.js';
import { startOtlpReceiver, type OtlpReceiver, type OtlpSpan } from '../../helpers/otlp-receiver.js';
import { serveInSuite, startMockerSuite, workerEntry, type MockerSuite } from '../../helpers/serve-suite.js';
import { until } from '../../helpers/until.js';

const AGG = 'agg-model';
const PD = 'pd-model';
const FAST = ['--speedup', '1000', '--tokenizer', 'demo'];
const CLIENT_SPAN = '00f067aa0ba902b7';
const TRACESTATE = 'vendor=opaque-1,other=x';
const API_KEY = 'sk-trace-secret-4f1c';
/** In every prompt: no span may carry it (prompt text is not an attribute). */
const PROMPT_MARKER = 'zebra-marker-prompt-text';

interface Traced {
  path: string;
  traceparent: string;
  tracestate?: string;
}

/** A client trace id of its own per request (32 hex digits). */
const traceIdOf = (n: number): string => `${'a1b2c3d4'.repeat(3)}${n.toString(16).padStart(8, '0')}`;

describe('trace context through kvgate serve on every inference API', () => {
  let suite: MockerSuite;
  let otlp: OtlpReceiver;
  let url: string;
  let agg: MockerLine;
  let prefill: MockerLine;
  let decode: MockerLine;

  beforeAll(async () => {
    otlp = await startOtlpReceiver();
    suite = await startMockerSuite('otlp-context', [...FAST, '--model', AGG], 1);
    agg = suite.engines[0]!;
    const p = await startMockerCli([...FAST, '--model', PD, '--mode', 'prefill'], 1);
    const d = await startMockerCli([...FAST, '--model', PD, '--mode', 'decode'], 1);
    suite.procs.push(p.proc, d.proc);
    prefill = p.engines[0]!;
    decode = d.engines[0]!;
    const config = [
      'listen: { port: 0 }',
      'preprocess: { threads: 0 }',
      `auth: { api_keys: [${API_KEY}] }`,
      `tracing: { otlp_endpoint: "${otlp.url}", sample_ratio: 1 }`,
      'models:',
      `  - name: ${AGG}`,
      '    tokenizer: demo',
      '    workers:',
      `      - ${workerEntry(1, agg)}`,
      `  - name: ${PD}`,
      '    tokenizer: demo',
      '    workers:',
      `      - { id: 2, role: prefill, url: "${prefill.url}", kv_events: "${prefill.kv_events[0]}" }`,
      `      - { id: 3, role: decode, url: "${decode.url}", kv_events: "${decode.kv_events[0]}" }`,
      '',
    ].join('\n');
    url = await serveInSuite(suite, suite.write('kvgate.yaml', config));
  }, 120_000);
  afterAll(async () => {
    await suite?.stop();
    await otlp?.close();
  });

  const post = async (path: string, body: Record<string, unknown>, traceId: string): Promise<void> => {
    const res = await fetch(`${url}${path}`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${API_KEY}`,
        'x-api-key': API_KEY,
        'content-type': 'application/json',
        traceparent: `00-${traceId}-${CLIENT_SPAN}-01`,
        tracestate: TRACESTATE,
      },
      body: JSON.stringify(body),
    });
    expect(res.status, await res.clone().text()).toBe(200);
    await res.arrayBuffer();
  };
  const tracedOf = async (engine: MockerLine): Promise<Traced[]> =>
    ((await (await fetch(`${engine.url}/admin/state`)).json()) as { traced: Traced[] }).traced;
  const spansOf = async (traceId: string, names: readonly string[]): Promise<OtlpSpan[]> => {
    const inTrace = (): OtlpSpan[] => otlp.spans.filter((s) => s.traceId === traceId);
    await until(() => names.every((n) => inTrace().some((s) => s.name === n)), `spans ${names.join(', ')}`, 20_000);
    return inTrace();
  };

  const prompt = `a prompt long enough to fill a block or two of tokens for the engine to read ${PROMPT_MARKER}`;
  const apis: [string, string, Record<string, unknown>][] = [
    ['chat', '/v1/chat/completions', { messages: [{ role: 'user', content: prompt }], max_tokens: 4 }],
    ['chat streamed', '/v1/chat/completions', { messages: [{ role: 'user', content: prompt }], stream: true }],
    ['completions', '/v1/completions', { prompt, max_tokens: 4 }],
    ['messages', '/v1/messages', { messages: [{ role: 'user', content: prompt }], max_tokens: 4 }],
    ['responses', '/v1/responses', { input: prompt, max_output_tokens: 4 }],
    ['embeddings', '/v1/embeddings', { input: prompt }],
  ];
  it.each(apis.map((a, i) => [...a, i] as const))(
    "%s: the client's trace continues and the engine gets the leg's traceparent and the tracestate",
    async (_name, path, body, i) => {
      const traceId = traceIdOf(i + 1);
      await post(path, { model: AGG, ...body }, traceId);
      const spans = await spansOf(traceId, ['kvgate.request', 'kvgate.engine.aggregated']);
      const root = spans.find((s) => s.name === 'kvgate.request')!;
      const leg = spans.find((s) => s.name === 'kvgate.engine.aggregated')!;
      expect(root.parentSpanId).toBe(CLIENT_SPAN);
      expect(root.traceState).toBe(TRACESTATE);
      expect(leg.parentSpanId).toBe(root.spanId);
      expect(leg.attributes).toMatchObject({ 'kvgate.model': AGG, 'kvgate.worker_id': 1, 'kvgate.dp_rank': 0 });
      const seen = (await tracedOf(agg)).filter((t) => t.traceparent.includes(traceId));
      expect(seen).toEqual([{ path, traceparent: `00-${traceId}-${leg.spanId}-01`, tracestate: TRACESTATE }]);
    },
    30_000,
  );

  it('a disaggregated request: each leg carries its own span to its engine, the decode span linked to the prefill', async () => {
    const traceId = traceIdOf(100);
    await post(
      '/v1/chat/completions',
      { model: PD, messages: [{ role: 'user', content: prompt }], max_tokens: 4 },
      traceId,
    );
    const spans = await spansOf(traceId, ['kvgate.request', 'kvgate.engine.prefill', 'kvgate.engine.decode']);
    const root = spans.find((s) => s.name === 'kvgate.request')!;
    const p = spans.find((s) => s.name === 'kvgate.engine.prefill')!;
    const d = spans.find((s) => s.name === 'kvgate.engine.decode')!;
    expect(root.parentSpanId).toBe(CLIENT_SPAN);
    for (const leg of [p, d]) expect(leg.parentSpanId).toBe(root.spanId);
    expect(d.links).toEqual([p.spanId]);
    expect(p.attributes).toMatchObject({ 'kvgate.worker_id': 2, 'kvgate.phase': 'prefill' });
    expect(d.attributes).toMatchObject({ 'kvgate.worker_id': 3, 'kvgate.phase': 'decode' });
    const onPrefill = (await tracedOf(prefill)).filter((t) => t.traceparent.includes(traceId));
    const onDecode = (await tracedOf(decode)).filter((t) => t.traceparent.includes(traceId));
    expect(onPrefill.map((t) => [t.traceparent, t.tracestate])).toEqual([[`00-${traceId}-${p.spanId}-01`, TRACESTATE]]);
    expect(onDecode.map((t) => [t.traceparent, t.tracestate])).toEqual([[`00-${traceId}-${d.spanId}-01`, TRACESTATE]]);
  }, 30_000);

  it("the same prompt again: the route span names the overlap and the leg span the engine's cached tokens", async () => {
    const body = {
      model: AGG,
      messages: [{ role: 'user', content: `an opening no other case sends, then ${prompt} ${'again '.repeat(40)}` }],
      max_tokens: 2,
    };
    const legs: OtlpSpan[] = [];
    const routes: OtlpSpan[] = [];
    for (const n of [300, 301]) {
      await post('/v1/chat/completions', body, traceIdOf(n));
      const spans = await spansOf(traceIdOf(n), ['kvgate.route', 'kvgate.engine.aggregated']);
      routes.push(spans.find((s) => s.name === 'kvgate.route')!);
      legs.push(spans.find((s) => s.name === 'kvgate.engine.aggregated')!);
    }
    const cached = legs.map((l) => l.attributes['kvgate.cached_tokens'] as number);
    expect(cached[0]).toBe(0);
    expect(routes[1]!.attributes['kvgate.overlap_blocks']).toBeGreaterThan(0);
    expect(cached[1]).toBeGreaterThan(0);
  }, 30_000);

  it('no span carries the API key, the Authorization header, the query string or the prompt text', async () => {
    const traceId = traceIdOf(200);
    await post(
      `/v1/chat/completions?api_key=${API_KEY}`,
      { model: AGG, messages: [{ role: 'user', content: prompt }] },
      traceId,
    );
    const root = (await spansOf(traceId, ['kvgate.request', 'kvgate.engine.aggregated'])).find(
      (s) => s.name === 'kvgate.request',
    )!;
    expect(root.attributes['url.path']).toBe('/v1/chat/completions');
    // Every request of this suite sent the key and the marker; the collector got none of them.
    expect(otlp.bodies.length).toBeGreaterThan(0);
    for (const body of otlp.bodies) {
      expect(body).not.toContain(API_KEY);
      expect(body).not.toContain(PROMPT_MARKER);
      expect(body.toLowerCase()).not.toContain('bearer');
    }
  }, 30_000);
});
