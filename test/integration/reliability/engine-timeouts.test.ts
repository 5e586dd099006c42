/**
 * A stalled engine no longer holds requests until the request timeout
 * (issue 13 item 9), with real processes: a `kvgate mocker` started with the
 * stall fault and `kvgate serve` with short per-model engine timeouts. A
 * stream that stops mid-way ends with KVG_ERR_ENGINE_STREAM_IDLE_TIMEOUT after
 * the tokens it got; one that never produces an event ends with
 * KVG_ERR_ENGINE_FIRST_BYTE_TIMEOUT; each within its bound, counted, and the
 * worker's booking freed. Once the fault is lifted the same worker serves.
 */
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ROOT, lineOf, MOCKER_OS_PORTS, start, stop, type Proc } from '../../helpers/process.js';
import { until } from '../../helpers/until.js';

const FIRST_BYTE_MS = 1500;
const IDLE_MS = 700;

describe('engine leg timeouts over real processes', () => {
  let dir: string;
  let mocker: Proc | undefined;
  let gateway: Proc | undefined;
  let engine: Record<string, unknown>;
  let url: string;

  beforeAll(async () => {
    if (!existsSync(join(ROOT, 'dist/src/cli/index.js')))
      throw new Error('dist/ is missing: run `npm run build` first (npm test does)');
    dir = mkdtempSync(join(tmpdir(), 'kvgate-engine-timeouts-'));
    mocker = start(['mocker', ...MOCKER_OS_PORTS, '--speedup', '50', '--fault-stall-after-tokens', '2']);
    engine = await lineOf(mocker, "the mocker's ports", (o) => typeof o.url === 'string');
    const config = join(dir, 'kvgate.json');
    writeFileSync(
      config,
      JSON.stringify({
        listen: { host: '127.0.0.1', port: 0 },
        preprocess: { threads: 0 },
        log: { level: 'info' },
        engine_timeouts: { first_byte_timeout_ms: 60_000 },
        models: [
          {
            name: engine.model,
            block_size: 16,
            router_mode: 'round-robin',
            engine_timeouts: { first_byte_timeout_ms: FIRST_BYTE_MS, stream_idle_timeout_ms: IDLE_MS },
            workers: [{ id: 1, url: engine.url }],
          },
        ],
      }),
    );
    gateway = start(['serve', '--config', config]);
    url = String(
      (await lineOf(gateway, "the gateway's startup line", (o) => o.msg === 'kvgate gateway started')).listen,
    );
  }, 60_000);

  afterAll(async () => {
    await Promise.all([stop(gateway), stop(mocker)]);
    rmSync(dir, { recursive: true, force: true });
  });

  /** A streamed completion: its status, the data payloads (or the error body) and how long the whole answer took. */
  async function stream(): Promise<{ status: number; payloads: string[]; ms: number }> {
    const t0 = performance.now();
    const res = await fetch(`${url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        model: engine.model,
        prompt: 'tell me about stalled engines',
        max_tokens: 32,
        stream: true,
      }),
    });
    const text = await res.text();
    const payloads = res.status === 200 ? [...text.matchAll(/^data: (.*)$/gm)].map((m) => m[1]!) : [text];
    return { status: res.status, payloads, ms: performance.now() - t0 };
  }

  async function metric(pattern: RegExp): Promise<number | undefined> {
    const text = await (await fetch(`${url}/metrics`)).text();
    const line = text.split('\n').find((l) => pattern.test(l));
    return line === undefined ? undefined : Number(line.split(' ').pop());
  }

  const activeRequests =
    /^kvgate_worker_active_requests\{model="[^"]+",worker_id="1",dp_rank="0",worker_type="aggregated"\}/;

  it('a stream that stalls after two tokens ends with KVG_ERR_ENGINE_STREAM_IDLE_TIMEOUT within the idle bound; the booking is freed', async () => {
    const { status, payloads, ms } = await stream();
    expect(status).toBe(200);
    const tokens = payloads.filter((p) => p.startsWith('{') && !p.includes('"error"'));
    expect(tokens).toHaveLength(2);
    const error = JSON.parse(payloads.at(-1)!) as { error: { code: string; type: string; message: string } };
    expect(error.error.code).toBe('KVG_ERR_ENGINE_STREAM_IDLE_TIMEOUT');
    expect(error.error.message).not.toContain(String(engine.url));
    expect(ms).toBeLessThan(IDLE_MS + 4_000);
    expect(ms).toBeGreaterThanOrEqual(IDLE_MS - 50);
    await until(async () => (await metric(activeRequests)) === 0, "the worker's booking to be freed");
    expect(await metric(/^kvgate_router_engine_timeouts_total\{[^}]*kind="stream_idle"\}/)).toBe(1);
    // Loud: the gateway logged the cut with the worker.
    await lineOf(
      gateway!,
      'the timeout warn line',
      (o) => o.level === 40 && o.workerId === 1 && o.code === 'KVG_ERR_ENGINE_STREAM_IDLE_TIMEOUT',
    );
  }, 30_000);

  // Merge of the streamed engine legs with the leg timeouts: a client that asked for stream: false is served
  // from a streamed leg, so the idle bound cuts its stalled answer too (it used to wait for the request timeout),
  // and the cut is counted once.
  it('a non-streaming request on the stalled engine: 504 KVG_ERR_ENGINE_STREAM_IDLE_TIMEOUT within the idle bound, counted once', async () => {
    const t0 = performance.now();
    const res = await fetch(`${url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        model: engine.model,
        prompt: 'tell me about stalled engines',
        max_tokens: 32,
        stream: false,
      }),
    });
    const body = (await res.json()) as { error: { code: string; message: string } };
    const ms = performance.now() - t0;
    expect(res.status).toBe(504);
    expect(body.error.code).toBe('KVG_ERR_ENGINE_STREAM_IDLE_TIMEOUT');
    expect(body.error.message).not.toContain(String(engine.url));
    expect(ms).toBeLessThan(IDLE_MS + 4_000);
    await until(async () => (await metric(activeRequests)) === 0, "the worker's booking to be freed");
    expect(await metric(/^kvgate_router_engine_timeouts_total\{[^}]*kind="stream_idle"\}/)).toBe(2);
  }, 30_000);

  it('an engine that never sends a byte: 504 KVG_ERR_ENGINE_FIRST_BYTE_TIMEOUT within the first-byte bound', async () => {
    await setStall(0); // the engine takes the request and never writes its response head
    const { status, payloads, ms } = await stream();
    expect(status).toBe(504);
    expect((JSON.parse(payloads[0]!) as { error: { code: string } }).error.code).toBe(
      'KVG_ERR_ENGINE_FIRST_BYTE_TIMEOUT',
    );
    expect(ms).toBeLessThan(FIRST_BYTE_MS + 4_000);
    expect(ms).toBeGreaterThanOrEqual(FIRST_BYTE_MS - 50);
    await until(async () => (await metric(activeRequests)) === 0, "the worker's booking to be freed");
    expect(await metric(/^kvgate_router_engine_timeouts_total\{[^}]*kind="first_byte"\}/)).toBe(1);
  }, 30_000);

  it('with the fault lifted the same worker answers in full', async () => {
    await setStall(null);
    const { status, payloads } = await stream();
    expect(status).toBe(200);
    expect(payloads.at(-1)).toBe('[DONE]');
    expect(payloads.some((p) => p.includes('"error"'))).toBe(false);
  }, 30_000);

  async function setStall(n: number | null): Promise<void> {
    const res = await fetch(`${String(engine.url)}/admin/faults`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ stall_after_tokens: n }),
    });
    expect(res.status).toBe(200);
    await res.arrayBuffer();
  }
});
