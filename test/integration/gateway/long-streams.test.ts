/**
 * Issue 23, section 1: streams of any length for any reader. `kvgate serve`
 * in front of fast `kvgate mocker` engines (real processes, real sockets),
 * streams of 1,000 to 10,000 events read straight, with pauses that let the
 * socket buffers fill and drain, by a reader slower than the engine, and
 * through the official Node SDK; aggregated and disaggregated. Every stream
 * ends with every token and `[DONE]`. Before the fix the relay waited for a
 * 'drain' that had already come, and most of these streams hung.
 *
 * Also the bounds on a client that stops reading: the stall bound
 * (`limits.client_stall_timeout_ms`) cuts its stream and frees its booking;
 * the request deadline bounds a stream whose upstream is paused by such a
 * client; and at shutdown a stream still open at the drain deadline ends with
 * an error event.
 */
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startMockerCli, startServeCli, type CliProcess, type MockerLine } from '../../helpers/cli-process.js';
import { metric } from '../../helpers/metric-sum.js';
import { serveConfig, startMockerSuite, workerEntry, type MockerSuite } from '../../helpers/serve-suite.js';
import { readSse, streamUsage, tokenChunks, type Pace, type SseRead } from '../../helpers/sse-reader.js';
import { until } from '../../helpers/until.js';

const MODEL = 'mock-model';
const FAST = ['--speedup', '1000', '--max-model-len', '65536', '--tokenizer', 'demo'];

/** Every token, the usage chunk, `[DONE]` last, no error event, a clean end. */
function expectComplete(r: SseRead, tokens: number): void {
  expect(r.status).toBe(200);
  expect(r.ending).toBe('end');
  expect(r.events.filter((e) => e !== '[DONE]' && (JSON.parse(e) as { error?: unknown }).error !== undefined)).toEqual(
    [],
  );
  expect(r.events.at(-1)).toBe('[DONE]');
  expect(tokenChunks(r.events)).toBe(tokens);
  expect(streamUsage(r.events)?.completion_tokens).toBe(tokens);
}

const completion = (maxTokens: number): Record<string, unknown> => ({
  model: MODEL,
  prompt: 'Tell a very long story.',
  max_tokens: maxTokens,
  ignore_eos: true,
  stream: true,
  stream_options: { include_usage: true },
});
const chat = (maxTokens: number): Record<string, unknown> => ({
  model: MODEL,
  messages: [{ role: 'user', content: 'Tell a very long story.' }],
  max_tokens: maxTokens,
  ignore_eos: true,
  stream: true,
  stream_options: { include_usage: true },
});

/** Pauses of 30 ms every 64 KB: long enough for the gateway's socket buffer to fill, then drain. */
const PAUSED: Pace = { pauseEveryBytes: 64 * 1024, pauseMs: 30 };
/** 2 ms every 4 KB: at most 2 MB/s, slower than the engine at speedup 1000. */
const SLOW: Pace = { pauseEveryBytes: 4 * 1024, pauseMs: 2 };

async function gateway(
  suite: MockerSuite,
  name: string,
  workers: readonly string[],
  top: readonly string[] = [],
  model: readonly string[] = [],
): Promise<string> {
  const file = suite.write(
    `${name}.yaml`,
    serveConfig(
      MODEL,
      [...model, 'workers:', ...workers.map((w) => `  - ${w}`)],
      ['admin: { enabled: true }', 'preprocess: { threads: 0 }', ...top],
    ),
  );
  const { proc, url } = await startServeCli(file);
  suite.procs.push(proc);
  return url;
}

describe('long streams through kvgate serve, aggregated (issue 23)', () => {
  let suite: MockerSuite;
  let url: string;
  let workers: string[];

  beforeAll(async () => {
    suite = await startMockerSuite('long-streams', FAST, 2);
    workers = suite.engines.map((e, i) => workerEntry(i + 1, e));
    url = await gateway(suite, 'main', workers);
  });
  afterAll(async () => {
    await suite?.stop();
  });

  it('completions of 1,000, 4,000 and 10,000 tokens read straight, four at once, end with every token and [DONE]', async () => {
    const sizes = [1000, 4000, 10_000, 4000];
    const reads = await Promise.all(sizes.map((n) => readSse(`${url}/v1/completions`, completion(n))));
    reads.forEach((r, i) => expectComplete(r, sizes[i]!));
  });

  it('completions and chat read with pauses that fill and drain the socket buffers end with every token and [DONE]', async () => {
    const reads = await Promise.all([
      readSse(`${url}/v1/completions`, completion(10_000), PAUSED),
      readSse(`${url}/v1/chat/completions`, chat(10_000), PAUSED),
      readSse(`${url}/v1/completions`, completion(4000), PAUSED),
      readSse(`${url}/v1/chat/completions`, chat(1000), PAUSED),
    ]);
    [10_000, 10_000, 4000, 1000].forEach((n, i) => expectComplete(reads[i]!, n));
  });

  it('a reader slower than the engine gets the whole stream', async () => {
    const reads = await Promise.all([
      readSse(`${url}/v1/completions`, completion(4000), SLOW),
      readSse(`${url}/v1/chat/completions`, chat(4000), SLOW),
    ]);
    expectComplete(reads[0]!, 4000);
    expectComplete(reads[1]!, 4000);
  });

  it('the official openai SDK reads twelve 1,000- and 4,000-token streams, some with pauses, to their end', async () => {
    const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'unused', maxRetries: 0 });
    const one = async (i: number): Promise<number> => {
      const stream = await client.chat.completions.create({
        model: MODEL,
        messages: [{ role: 'user', content: `Story number ${i}.` }],
        max_tokens: i % 2 === 0 ? 1000 : 4000,
        stream: true,
      });
      let tokens = 0;
      for await (const chunk of stream) {
        if (chunk.choices[0]?.delta?.content !== undefined && chunk.choices[0].delta.role === undefined) tokens++;
        // A third of the readers stop for a moment now and then.
        if (i % 3 === 0 && tokens % 700 === 0) await new Promise((r) => setTimeout(r, 40));
      }
      return tokens;
    };
    const counts = await Promise.all(Array.from({ length: 12 }, (_, i) => one(i)));
    expect(counts).toEqual(Array.from({ length: 12 }, (_, i) => (i % 2 === 0 ? 1000 : 4000)));
  });

  it('a client that stops reading is cut after limits.client_stall_timeout_ms; counted, logged, its booking freed', async () => {
    const stallUrl = await gateway(suite, 'stall', workers, ['limits: { client_stall_timeout_ms: 500 }']);
    const stalled = (): Promise<number> =>
      metric(stallUrl, 'kvgate_http_rejections_total', { code: 'KVG_ERR_CLIENT_STALLED' });
    // The reader stops after its first bytes and reads again only once the gateway has counted the stall.
    const r = await readSse(`${stallUrl}/v1/completions`, completion(40_000), {
      stopAfterBytes: 1,
      resumeWhen: () => until(async () => (await stalled()) === 1, 'the stall counted'),
    });
    expect(r.ending).toBe('cut');
    expect(r.events).not.toContain('[DONE]');
    expect(await stalled()).toBe(1);
    await until(
      async () => (await metric(stallUrl, 'kvgate_worker_active_requests')) === 0,
      "the stalled stream's booking freed",
    );
    expect(await metric(stallUrl, 'kvgate_http_inflight_requests')).toBe(0);
    const proc = suite.procs.at(-1)!;
    await proc.waitFor(/"code":"KVG_ERR_CLIENT_STALLED"/, 'the access log line with the stall code');
    expect(proc.output()).toMatch(/"stallMs":500,"msg":"stream cut: its client read none of the buffered answer/);
    // A reader that keeps reading is not cut.
    expectComplete(await readSse(`${stallUrl}/v1/completions`, completion(10_000), PAUSED), 10_000);
  });

  it('a client reading slower than the kernel reports its socket writable is not cut while it reads', async () => {
    // Linux reports the gateway's socket writable again ('drain') only once MBs of its send buffer are free: at
    // about 600 KB/s, seconds apart, longer than this bound. The gateway sees the reader take bytes from its kernel
    // send queue instead, mid-stream and after the answer's end alike. It cut this reader before. (The bound leaves
    // this process half a second between two reads: on a loaded machine a 500 ms bound left too little.)
    const slowUrl = await gateway(suite, 'slow-reader', workers, ['limits: { client_stall_timeout_ms: 1000 }']);
    const r = await readSse(`${slowUrl}/v1/completions`, completion(40_000), {
      pauseEveryBytes: 64 * 1024,
      pauseMs: 100,
    });
    expect(r.text.length).toBeGreaterThan(6_000_000);
    expectComplete(r, 40_000);
    expect(await metric(slowUrl, 'kvgate_http_rejections_total', { code: 'KVG_ERR_CLIENT_STALLED' })).toBe(0);
  });

  it('limits.request_timeout_ms bounds a stream whose upstream is paused by a client that stopped reading; its slot is freed', async () => {
    const timeoutUrl = await gateway(suite, 'deadline', workers, [
      'limits: { request_timeout_ms: 1500, max_concurrent_requests: 1 }',
    ]);
    const proc = suite.procs.at(-1)!;
    // The reader stops after its first bytes and reads again once the gateway has logged the request's end.
    const logged = (): Promise<RegExpMatchArray> =>
      proc.waitFor(
        /"ms":([\d.]+),[^\n]*"code":"KVG_ERR_REQUEST_TIMEOUT"/,
        'the access log line with the deadline code',
      );
    const r = await readSse(`${timeoutUrl}/v1/completions`, completion(40_000), {
      stopAfterBytes: 1,
      resumeWhen: logged,
    });
    // Cut, or (when the socket's buffers took what was left) ended by the deadline's error event: never complete.
    expect(r.events).not.toContain('[DONE]');
    if (r.ending === 'end')
      expect((JSON.parse(r.events.at(-1)!) as { error?: { code: string } }).error?.code).toBe(
        'KVG_ERR_REQUEST_TIMEOUT',
      );
    // The stall bound (60 s by default) did not end it: the request's deadline did (1.5 s, then a 1 s linger for its error event).
    expect(Number((await logged())[1])).toBeLessThan(10_000);
    // The only concurrency slot is free again.
    await until(async () => (await metric(timeoutUrl, 'kvgate_http_inflight_requests')) === 0, 'the slot released');
    expectComplete(await readSse(`${timeoutUrl}/v1/completions`, completion(1000)), 1000);
  });
});

describe('long streams through kvgate serve, disaggregated (issue 23)', () => {
  let suite: MockerSuite;
  let decode: CliProcess;
  let url: string;

  beforeAll(async () => {
    suite = await startMockerSuite(
      'long-streams-pd',
      [...FAST, '--engine', 'sglang', '--mode', 'prefill', '--bootstrap-port', '0'],
      1,
    );
    const d = await startMockerCli([...FAST, '--engine', 'sglang', '--mode', 'decode'], 1);
    decode = d.proc;
    suite.procs.push(decode);
    const p = suite.engines[0]! as MockerLine & { bootstrap_port: number };
    const workers = [
      `{ id: 1, role: prefill, url: "${p.url}", bootstrap_port: ${p.bootstrap_port}, kv_events: "${p.kv_events[0]}" }`,
      `{ id: 2, role: decode, url: "${d.engines[0]!.url}", kv_events: "${d.engines[0]!.kv_events[0]}" }`,
    ];
    url = await gateway(suite, 'pd', workers, [], ['engine: sglang']);
  });
  afterAll(async () => {
    await suite?.stop();
  });

  it('completions and chat of 4,000 and 10,000 tokens, straight and with pauses, end with every token and [DONE]', async () => {
    const reads = await Promise.all([
      readSse(`${url}/v1/completions`, completion(10_000)),
      readSse(`${url}/v1/chat/completions`, chat(10_000), PAUSED),
      readSse(`${url}/v1/completions`, completion(4000), SLOW),
    ]);
    [10_000, 10_000, 4000].forEach((n, i) => expectComplete(reads[i]!, n));
    expect(reads[0]!.headers['x-kvgate-prefill-worker']).toBe('1');
  });
});

describe('shutdown with a stream still open (issue 23)', () => {
  it('a stream still running at the drain deadline ends with a KVG_ERR_SHUTTING_DOWN error event before the close', async () => {
    // A slow engine: the stream outlives the 500 ms drain.
    const suite = await startMockerSuite('long-streams-drain', ['--speedup', '20', '--max-model-len', '65536'], 1);
    try {
      const url = await gateway(
        suite,
        'drain',
        [workerEntry(1, suite.engines[0]!)],
        ['shutdown: { drain_timeout_ms: 500 }'],
      );
      const gw = suite.procs.at(-1)!;
      const reading = readSse(`${url}/v1/completions`, completion(20_000), PAUSED);
      await until(async () => (await metric(url, 'kvgate_worker_active_requests')) === 1, 'the stream running');
      gw.child.kill('SIGTERM');
      const r = await reading;
      expect(r.status).toBe(200);
      expect(r.ending).toBe('end');
      const last = JSON.parse(r.events.at(-1)!) as { error?: { code: string } };
      expect(last.error?.code).toBe('KVG_ERR_SHUTTING_DOWN');
      expect(r.events).not.toContain('[DONE]');
    } finally {
      await suite.stop();
    }
  });
});
