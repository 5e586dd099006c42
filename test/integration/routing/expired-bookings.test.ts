/**
 * A booking whose request's end kvgate never sees in time is force-freed at the router's
 * `active_request_expiry_secs`, and that is loud: counted in `kvgate_router_bookings_expired_total` and a warn line
 * naming the request. With `kvgate serve` in front of a `kvgate mocker` engine (real processes, real sockets), a
 * stream that outlives a 1 s expiry stands in for a lost free. Before, such an expiry was silent.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { jsonLogLines, startServeCli, type CliProcess } from '../../helpers/cli-process.js';
import { metric } from '../../helpers/metric-sum.js';
import { serveConfig, startMockerSuite, workerEntry, type MockerSuite } from '../../helpers/serve-suite.js';
import { readSse } from '../../helpers/sse-reader.js';
import { until } from '../../helpers/until.js';

const MODEL = 'mock-model';

describe('bookings force-freed at the expiry', () => {
  let suite: MockerSuite;
  let gateway: CliProcess;
  let url: string;

  beforeAll(async () => {
    // Real-time engine (speedup 1): a 400-token answer streams for seconds.
    suite = await startMockerSuite('expired-bookings', ['--speedup', '1', '--tokenizer', 'demo'], 1);
    const file = suite.write(
      'serve.yaml',
      serveConfig(MODEL, [
        'router: { active_request_expiry_secs: 1 }',
        'workers:',
        `  - ${workerEntry(1, suite.engines[0]!)}`,
      ]),
    );
    const gw = await startServeCli(file);
    gateway = gw.proc;
    suite.procs.push(gateway);
    url = gw.url;
  });

  afterAll(async () => {
    await suite?.stop();
  });

  it('are counted and logged with the request, while the stream itself goes on to its end', async () => {
    const expired = (): Promise<number> => metric(url, 'kvgate_router_bookings_expired_total');
    expect(await expired()).toBe(0);
    const stream = readSse(
      `${url}/v1/chat/completions`,
      { model: MODEL, stream: true, max_tokens: 400, ignore_eos: true, messages: [{ role: 'user', content: 'Hi.' }] },
      {},
      { 'x-request-id': 'outlives-expiry' },
    );
    await until(async () => (await expired()) === 1, 'the booking expired', 20_000);
    await until(async () => (await metric(url, 'kvgate_worker_active_requests')) === 0, 'its load gone');
    const warned = jsonLogLines(gateway).filter(
      (l) => l['msg'] !== undefined && String(l['msg']).includes('force-freed'),
    );
    expect(warned).toHaveLength(1);
    expect(warned[0]).toMatchObject({ level: 40, expired: 1, workerType: 'decode' });
    expect((warned[0]!['requestIds'] as string[])[0]).toMatch(/^outlives-expiry/);
    const r = await stream;
    expect(r.status).toBe(200);
    expect(r.ending).toBe('end');
    expect(r.text).toContain('data: [DONE]');
    // Its end, seen after the expiry, frees nothing more and is not counted again.
    expect(await expired()).toBe(1);
  }, 60_000);
});
