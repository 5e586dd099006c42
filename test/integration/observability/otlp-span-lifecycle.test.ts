/**
 * How a request's spans end and fail, through `kvgate serve` (a real gateway process) in front of two real
 * `kvgate mocker` engines whose faults this test sets at run time (POST /admin/faults), read at an OTLP/HTTP (JSON)
 * receiver run by this test (test/helpers/otlp-receiver.ts, a double that speaks the protocol):
 * - a retry on another worker is a `kvgate.retry` span around a new engine-leg span (its own span id, sent to the
 *   second engine), and the failed first leg's span is ERROR with its error code; a stream migrated mid-way gets a
 *   new engine-leg span too;
 * - a failed request's server span names the error code it was answered with: ERROR for a 5xx, unset for a 4xx;
 * - a stream whose engine fails after some tokens: the server span (answered 200) is ERROR with the code;
 * - a client that leaves mid-stream (the engine stalled, never ending the stream) ends the leg's and the request's
 *   spans, the request's marked `kvgate.client_aborted`.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { MockerLine } from '../../helpers/cli-process.js';
import { startOtlpReceiver, type OtlpReceiver, type OtlpSpan } from '../../helpers/otlp-receiver.js';
import {
  serveConfig,
  serveInSuite,
  startMockerSuite,
  workerEntry,
  type MockerSuite,
} from '../../helpers/serve-suite.js';
import { until } from '../../helpers/until.js';

const MODEL = 'mock-model';
const CLIENT_SPAN = '00f067aa0ba902b7';
const STATUS_ERROR = 2;
let traces = 0;
/** A client trace id of its own (32 hex digits). */
const nextTrace = (): string => `${'c0ffee00'.repeat(3)}${(++traces).toString(16).padStart(8, '0')}`;

describe("a request's spans end and fail as an operator reads them", () => {
  let suite: MockerSuite;
  let otlp: OtlpReceiver;
  let url: string;
  let engines: readonly MockerLine[];

  beforeAll(async () => {
    otlp = await startOtlpReceiver();
    suite = await startMockerSuite('otlp-lifecycle', ['--speedup', '1000', '--tokenizer', 'demo', '--model', MODEL], 2);
    engines = suite.engines;
    const top = [
      'preprocess: { threads: 0 }',
      `tracing: { otlp_endpoint: "${otlp.url}", sample_ratio: 1 }`,
      // A worker failing every request would be ejected (outlier-ejection.test.ts); here it stays routed.
      'health: { outlier_detection: { consecutive_errors: 0 } }',
    ];
    const model = ['router_mode: round-robin', 'workers:', ...engines.map((e, i) => `  - ${workerEntry(i + 1, e)}`)];
    url = await serveInSuite(suite, suite.write('kvgate.yaml', serveConfig(MODEL, model, top)));
  }, 120_000);
  afterAll(async () => {
    await suite?.stop();
    await otlp?.close();
  });

  const faults = async (engine: MockerLine, f: Record<string, unknown>): Promise<void> => {
    const res = await fetch(`${engine.url}/admin/faults`, { method: 'POST', body: JSON.stringify(f) });
    expect(res.status).toBe(200);
  };
  const healthy = { error_rate: 0, stall_after_tokens: null, error_after_tokens: null };
  const chat = (traceId: string, body: Record<string, unknown> = {}, signal?: AbortSignal): Promise<Response> =>
    fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', traceparent: `00-${traceId}-${CLIENT_SPAN}-01` },
      body: JSON.stringify({
        model: MODEL,
        messages: [{ role: 'user', content: 'hello there' }],
        max_tokens: 4,
        ...body,
      }),
      signal,
    });
  const spansOf = async (traceId: string, names: readonly string[], within = 20_000): Promise<OtlpSpan[]> => {
    const inTrace = (): OtlpSpan[] => otlp.spans.filter((s) => s.traceId === traceId);
    await until(() => names.every((n) => inTrace().some((s) => s.name === n)), `spans ${names.join(', ')}`, within);
    return inTrace();
  };

  it('a retry on another worker is a kvgate.retry span around a new engine-leg span', async () => {
    await faults(engines[0]!, { ...healthy, error_rate: 1, error_status: 503 });
    await faults(engines[1]!, healthy);
    // Round-robin: of two requests, one goes first to the failing worker and is retried on the other.
    const ids = [nextTrace(), nextTrace()];
    for (const id of ids) {
      const res = await chat(id);
      expect(res.status, await res.text()).toBe(200);
    }
    const retriedOf = (): string | undefined =>
      ids.find((id) => otlp.spans.some((s) => s.traceId === id && s.name === 'kvgate.retry'));
    await until(() => retriedOf() !== undefined, 'a retried request', 20_000);
    const retried = retriedOf()!;
    const legsOf = (): OtlpSpan[] =>
      otlp.spans.filter((s) => s.traceId === retried && s.name === 'kvgate.engine.aggregated');
    const spans = await spansOf(retried, ['kvgate.request', 'kvgate.retry']);
    await until(() => legsOf().length === 2, 'the two engine legs', 20_000);
    const root = spans.find((s) => s.name === 'kvgate.request')!;
    const retry = spans.find((s) => s.name === 'kvgate.retry')!;
    const legs = legsOf();
    const first = legs.find((s) => s.attributes['kvgate.worker_id'] === 1)!;
    const second = legs.find((s) => s.attributes['kvgate.worker_id'] === 2)!;
    expect(first.parentSpanId).toBe(root.spanId);
    expect(first.statusCode).toBe(STATUS_ERROR);
    expect(first.attributes['kvgate.error.code']).toMatch(/^KVG_ERR_/);
    expect(retry.parentSpanId).toBe(root.spanId);
    expect(retry.attributes['kvgate.retry.attempt']).toBe(1);
    expect(second.parentSpanId).toBe(retry.spanId);
    expect(second.spanId).not.toBe(first.spanId);
    expect(second.statusCode).not.toBe(STATUS_ERROR);
    const state = (await (await fetch(`${engines[1]!.url}/admin/state`)).json()) as { traceparents: string[] };
    expect(state.traceparents).toContain(`00-${retried}-${second.spanId}-01`);
    // The request succeeded: its span is not failed.
    expect(root.statusCode).not.toBe(STATUS_ERROR);
    expect(root.attributes['kvgate.error.code']).toBeUndefined();
  }, 60_000);

  it('a stream migrated mid-way to another worker: the new leg is a new span, sent to the second engine', async () => {
    await faults(engines[0]!, { ...healthy, error_after_tokens: 3, error_status: 503 });
    await faults(engines[1]!, healthy);
    // Round-robin: of two requests, one starts on the failing worker and resumes on the other.
    const ids = [nextTrace(), nextTrace()];
    for (const id of ids) {
      const res = await chat(id, { stream: true, max_tokens: 12 });
      expect(res.status).toBe(200);
      expect(await res.text()).toContain('[DONE]');
    }
    const legsOf = (id: string): OtlpSpan[] =>
      otlp.spans.filter((s) => s.traceId === id && s.name === 'kvgate.engine.aggregated');
    await until(() => ids.some((id) => legsOf(id).length === 2), 'a migrated request', 20_000);
    const migrated = ids.find((id) => legsOf(id).length === 2)!;
    const [root] = (await spansOf(migrated, ['kvgate.request'])).filter((s) => s.name === 'kvgate.request');
    const first = legsOf(migrated).find((s) => s.attributes['kvgate.worker_id'] === 1)!;
    const second = legsOf(migrated).find((s) => s.attributes['kvgate.worker_id'] === 2)!;
    expect(first.statusCode).toBe(STATUS_ERROR);
    expect(second.spanId).not.toBe(first.spanId);
    expect(second.parentSpanId).toBe(root!.spanId);
    expect(second.statusCode).not.toBe(STATUS_ERROR);
    // The continuation's retries count from 0 again: the migration number tells the two legs apart.
    expect([first.attributes['kvgate.migration'], second.attributes['kvgate.migration']]).toEqual([0, 1]);
    expect(second.attributes['kvgate.attempt']).toBe(0);
    const state = (await (await fetch(`${engines[1]!.url}/admin/state`)).json()) as { traceparents: string[] };
    expect(state.traceparents).toContain(`00-${migrated}-${second.spanId}-01`);
    expect(root!.statusCode).not.toBe(STATUS_ERROR);
  }, 60_000);

  it("a failed request's span names the code it was answered with: ERROR for a 5xx, unset for a 4xx", async () => {
    for (const e of engines) await faults(e, { ...healthy, error_rate: 1, error_status: 503 });
    const failed = nextTrace();
    const res = await chat(failed);
    const code = ((await res.json()) as { error: { code: string } }).error.code;
    expect(res.status).toBeGreaterThanOrEqual(500);
    const refused = nextTrace();
    const bad = await chat(refused, { max_tokens: -1 });
    expect(bad.status).toBe(400);
    const badCode = ((await bad.json()) as { error: { code: string } }).error.code;
    const [root] = (await spansOf(failed, ['kvgate.request'])).filter((s) => s.name === 'kvgate.request');
    expect(root).toMatchObject({ statusCode: STATUS_ERROR, statusMessage: code });
    expect(root!.attributes['kvgate.error.code']).toBe(code);
    const [four] = (await spansOf(refused, ['kvgate.request'])).filter((s) => s.name === 'kvgate.request');
    expect(four!.attributes['kvgate.error.code']).toBe(badCode);
    expect(four!.statusCode).not.toBe(STATUS_ERROR);
  }, 60_000);

  it('a stream whose engine fails after some tokens: the request span (answered 200) is ERROR with the code', async () => {
    for (const e of engines) await faults(e, { ...healthy, error_after_tokens: 2, error_status: 503 });
    const id = nextTrace();
    const res = await chat(id, { stream: true, max_tokens: 50 });
    expect(res.status).toBe(200);
    const text = await res.text();
    expect(text).toContain('error');
    const spans = await spansOf(id, ['kvgate.request', 'kvgate.engine.aggregated']);
    const root = spans.find((s) => s.name === 'kvgate.request')!;
    const leg = spans.find((s) => s.name === 'kvgate.engine.aggregated')!;
    expect(leg.statusCode).toBe(STATUS_ERROR);
    expect(root.attributes['http.response.status_code']).toBe(200);
    expect(root.statusCode).toBe(STATUS_ERROR);
    expect(root.attributes['kvgate.error.code']).toBe(leg.attributes['kvgate.error.code']);
  }, 60_000);

  it('a client that leaves mid-stream (the engine stalled) ends the leg and request spans', async () => {
    for (const e of engines) await faults(e, { ...healthy, stall_after_tokens: 2 });
    const id = nextTrace();
    const abort = new AbortController();
    const res = await chat(id, { stream: true, max_tokens: 500 }, abort.signal);
    expect(res.status).toBe(200);
    const reader = res.body!.getReader();
    await reader.read();
    abort.abort();
    // The engine never ends its stream: only the client's leaving can end these spans.
    const spans = await spansOf(id, ['kvgate.request', 'kvgate.engine.aggregated'], 10_000);
    const root = spans.find((s) => s.name === 'kvgate.request')!;
    expect(root.attributes['kvgate.client_aborted']).toBe(true);
    expect(root.statusCode).not.toBe(STATUS_ERROR);
  }, 60_000);
});
