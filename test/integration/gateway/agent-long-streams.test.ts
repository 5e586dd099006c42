/**
 * The agent APIs' answers (Anthropic Messages, OpenAI Responses) for clients that read slowly or not at all, and
 * for a `stream: false` client whose answer grows too large: the guarantees long-streams.test.ts gives chat.
 *
 * With `kvgate mocker` engines (real processes, real sockets): streams of thousands of events read with pauses
 * that fill and drain the socket buffers, and slower than the engine, end with every event in order; a client
 * that stops reading is cut by `limits.client_stall_timeout_ms`, counted, logged and its booking freed.
 *
 * With a scripted engine that writes only as fast as kvgate reads it and counts what it wrote (the mocker paces
 * its streams too, but does not report how much of one it wrote, so it cannot show what kvgate reads): while the client is paused the gateway stops reading the engine, so the engine gets
 * only a few buffers' worth of a stream of 128 MB out; then the client reads every event in order.
 *
 * And a `stream: false` request whose answer, assembled from the engine's stream, grows past 64 MiB (the bound of
 * an engine's unstreamed answer) is refused with 502 KVG_ERR_ANSWER_TOO_LARGE, the engine's request cancelled and
 * the booking freed. Before the fix kvgate held the whole answer, however large, and answered 200.
 */
import type { ServerResponse } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServeCli } from '../../helpers/cli-process.js';
import { answerEngineProbe, sseHead, startHttpEngine, type HttpEngine } from '../../helpers/http-engine.js';
import { metric } from '../../helpers/metric-sum.js';
import { jsonLines, serveConfigObject, type ServedGateway } from '../../helpers/serve-process.js';
import { serveConfig, startMockerSuite, workerEntry, type MockerSuite } from '../../helpers/serve-suite.js';
import { namedEvents, readSse, type Pace, type SseRead } from '../../helpers/sse-reader.js';
import { until } from '../../helpers/until.js';

const MODEL = 'mock-model';
const FAST = ['--speedup', '1000', '--max-model-len', '65536', '--tokenizer', 'demo'];

/** Pauses of 30 ms every 64 KB: long enough for the gateway's socket buffer to fill, then drain. */
const PAUSED: Pace = { pauseEveryBytes: 64 * 1024, pauseMs: 30 };
/** 2 ms every 4 KB: at most 2 MB/s, slower than the engine at speedup 1000. */
const SLOW: Pace = { pauseEveryBytes: 4 * 1024, pauseMs: 2 };

const messages = (maxTokens: number, stream = true): Record<string, unknown> => ({
  model: MODEL,
  max_tokens: maxTokens,
  stream,
  messages: [{ role: 'user', content: 'Tell a very long story.' }],
});
const responses = (maxTokens: number): Record<string, unknown> => ({
  model: MODEL,
  max_output_tokens: maxTokens,
  stream: true,
  input: 'Tell a very long story.',
});

const data = (r: SseRead): Record<string, unknown>[] =>
  namedEvents(r).map((e) => JSON.parse(e.data) as Record<string, unknown>);

/** A whole Messages stream in Anthropic's order: start, one text block of `tokens` deltas, its stop, the end. */
function expectMessagesComplete(r: SseRead, tokens: number): void {
  expect(r.status).toBe(200);
  expect(r.ending).toBe('end');
  const types = data(r).map((e) => e['type']);
  expect(types.slice(0, 2)).toEqual(['message_start', 'content_block_start']);
  expect(types.slice(-3)).toEqual(['content_block_stop', 'message_delta', 'message_stop']);
  expect(types.slice(2, -3).every((t) => t === 'content_block_delta')).toBe(true);
  expect(types.length - 5).toBe(tokens);
  expect((data(r).at(-2)!['usage'] as { output_tokens: number }).output_tokens).toBe(tokens);
}

/** A whole Responses stream: sequence numbers 0, 1, 2, ... with none missing, `tokens` text deltas, completed last. */
function expectResponsesComplete(r: SseRead, tokens: number): void {
  expect(r.status).toBe(200);
  expect(r.ending).toBe('end');
  const events = data(r);
  expect(events.map((e) => e['sequence_number'])).toEqual(events.map((_, i) => i));
  expect(events.filter((e) => e['type'] === 'response.output_text.delta')).toHaveLength(tokens);
  expect(events.at(-1)!['type']).toBe('response.completed');
}

describe('agent API streams of thousands of events through kvgate serve, read at any pace', () => {
  let suite: MockerSuite;
  let workers: string[];
  let url: string;

  const gateway = async (name: string, top: readonly string[] = []): Promise<string> => {
    const file = suite.write(
      `${name}.yaml`,
      serveConfig(
        MODEL,
        ['workers:', ...workers.map((w) => `  - ${w}`)],
        ['admin: { enabled: true }', 'preprocess: { threads: 0 }', ...top],
      ),
    );
    const { proc, url: u } = await startServeCli(file);
    suite.procs.push(proc);
    return u;
  };

  beforeAll(async () => {
    suite = await startMockerSuite('agent-long-streams', FAST, 2);
    workers = suite.engines.map((e, i) => workerEntry(i + 1, e));
    url = await gateway('main');
  });
  afterAll(async () => {
    await suite?.stop();
  });

  it('Messages and Responses of 10,000 and 4,000 tokens, read with pauses and slower than the engine, end whole and in order', async () => {
    const reads = await Promise.all([
      readSse(`${url}/v1/messages`, messages(10_000), PAUSED),
      readSse(`${url}/v1/responses`, responses(10_000), PAUSED),
      readSse(`${url}/v1/messages`, messages(4000), SLOW),
      readSse(`${url}/v1/responses`, responses(4000), SLOW),
    ]);
    expectMessagesComplete(reads[0]!, 10_000);
    expectResponsesComplete(reads[1]!, 10_000);
    expectMessagesComplete(reads[2]!, 4000);
    expectResponsesComplete(reads[3]!, 4000);
  });

  it('a client that stops reading is cut after limits.client_stall_timeout_ms on either API; counted, logged, its booking freed', async () => {
    const stallUrl = await gateway('stall', ['limits: { client_stall_timeout_ms: 500 }']);
    const proc = suite.procs.at(-1)!;
    const stalled = (): Promise<number> =>
      metric(stallUrl, 'kvgate_http_rejections_total', { code: 'KVG_ERR_CLIENT_STALLED' });
    for (const [i, [path, body]] of (
      [
        ['/v1/messages', messages(40_000)],
        ['/v1/responses', responses(40_000)],
      ] as const
    ).entries()) {
      // The reader stops after its first bytes and reads again only once the gateway has counted the stall.
      const r = await readSse(`${stallUrl}${path}`, body, {
        stopAfterBytes: 1,
        resumeWhen: () => until(async () => (await stalled()) === i + 1, `the stall on ${path} counted`),
      });
      expect(r.ending).toBe('cut');
      expect(r.text).not.toContain('message_stop');
      expect(r.text).not.toContain('response.completed');
      await until(
        async () => (await metric(stallUrl, 'kvgate_worker_active_requests')) === 0,
        `the stalled stream's booking freed (${path})`,
      );
    }
    expect(await metric(stallUrl, 'kvgate_http_inflight_requests')).toBe(0);
    const accessLines = (): string[] =>
      proc
        .output()
        .split('\n')
        .filter((l) => l.includes('"msg":"request"') && l.includes('"code":"KVG_ERR_CLIENT_STALLED"'));
    await until(() => accessLines().length === 2, 'two access lines with the stall code');
    const cuts = proc.output().match(/"stallMs":500,"msg":"stream cut: its client read none of the buffered answer/g);
    expect(cuts).toHaveLength(2);
    // A reader that keeps reading is not cut.
    expectMessagesComplete(await readSse(`${stallUrl}/v1/messages`, messages(10_000), PAUSED), 10_000);
  });
});

/** Deltas of a paced stream, and the text of each: its index first (the order check), padded to 16 KiB. */
const PACED_DELTAS = 8000;
const PACED_TEXT_BYTES = 16 * 1024;
/**
 * 1 MiB text deltas: 200 of them make an answer far past the 64 MiB bound, so that what the engine has still to
 * write when kvgate stops at the bound is more than the socket buffers take (the engine sees its request cancelled).
 */
const BIG_PIECE = 'x'.repeat(1024 * 1024);
const BIG_PIECES = 200;

const sse = (type: string, body: Record<string, unknown>): string =>
  `event: ${type}\ndata: ${JSON.stringify({ type, ...body })}\n\n`;

/** The scripted engine's events for `path`: the API's own opening, `n` text deltas of `text(i)`, and its end. */
function* agentStream(path: string, n: number, text: (i: number) => string): Generator<string> {
  if (path === '/v1/messages') {
    yield sse('message_start', { message: { id: 'msg_1', type: 'message', role: 'assistant', content: [] } });
    yield sse('content_block_start', { index: 0, content_block: { type: 'text', text: '' } });
    for (let i = 0; i < n; i++)
      yield sse('content_block_delta', { index: 0, delta: { type: 'text_delta', text: text(i) } });
    yield sse('content_block_stop', { index: 0 });
    yield sse('message_delta', { delta: { stop_reason: 'end_turn' }, usage: { output_tokens: n } });
    yield sse('message_stop', {});
    return;
  }
  if (path === '/v1/responses') {
    yield sse('response.created', { sequence_number: 0, response: { id: 'resp_1', status: 'in_progress' } });
    for (let i = 1; i <= n; i++)
      yield sse('response.output_text.delta', { sequence_number: i, item_id: 'msg_1', delta: text(i - 1) });
    yield sse('response.completed', { sequence_number: n + 1, response: { id: 'resp_1', status: 'completed' } });
    return;
  }
  const chunk = (delta: Record<string, unknown>, finish: string | null = null): string =>
    `data: ${JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
  yield chunk({ role: 'assistant', content: '' });
  for (let i = 0; i < n; i++) yield chunk({ content: text(i) });
  yield chunk({}, 'stop');
  yield 'data: [DONE]\n\n';
}

/** What the scripted engine wrote of its one paced stream, and whether it waits for kvgate to read. */
interface Paced {
  written: number;
  total: number;
  blockedSince: number | undefined;
  done: boolean;
}

describe('agent API answers from an engine that writes only as fast as kvgate reads', () => {
  let engine: HttpEngine;
  let gw: ServedGateway;
  let paced: Paced = { written: 0, total: 0, blockedSince: undefined, done: false };

  /** Writes `frames` as the socket takes them (waiting for 'drain'), recording progress in `paced`. */
  async function writePaced(res: ServerResponse, frames: Iterable<string>, p: Paced): Promise<void> {
    for (const f of frames) {
      if (res.destroyed) return;
      p.written += Buffer.byteLength(f);
      if (res.write(f)) continue;
      p.blockedSince = performance.now();
      await new Promise<void>((resolve) => {
        const done = (): void => {
          res.off('drain', done);
          res.off('close', done);
          resolve();
        };
        res.on('drain', done);
        res.on('close', done);
      });
      p.blockedSince = undefined;
    }
    res.end();
    p.done = true;
  }

  beforeAll(async () => {
    engine = await startHttpEngine(async (req, res) => {
      if (answerEngineProbe(req, res, MODEL)) return;
      sseHead(res);
      if ((req.json as { stream?: boolean }).stream === true && req.headers['x-request-id'] !== 'big')
        return writePaced(
          res,
          agentStream(req.url, PACED_DELTAS, (i) => `${i}:`.padEnd(PACED_TEXT_BYTES, '.')),
          paced,
        );
      return writePaced(
        res,
        agentStream(req.url, BIG_PIECES, () => BIG_PIECE),
        {
          written: 0,
          total: 0,
          blockedSince: undefined,
          done: false,
        },
      );
    });
    gw = await serveConfigObject({
      listen: { host: '127.0.0.1', port: 0 },
      preprocess: { threads: 0 },
      admin: { enabled: true },
      log: { level: 'info' },
      models: [{ name: MODEL, tokenizer: 'demo', router_mode: 'round-robin', workers: [{ id: 1, url: engine.url }] }],
    });
  }, 60_000);

  afterAll(async () => {
    await gw?.stop();
    await engine?.close();
  });

  for (const [path, body] of [
    ['/v1/messages', messages(PACED_DELTAS)],
    ['/v1/responses', responses(PACED_DELTAS)],
  ] as const) {
    it(`${path}: while the client pauses the gateway stops reading the engine; then every event comes, in order`, async () => {
      paced = { written: 0, total: PACED_DELTAS * PACED_TEXT_BYTES, blockedSince: undefined, done: false };
      // The client stops after its first bytes until the engine has waited for the gateway to read for a second (the
      // socket buffers between them are full), or has written the whole stream (kvgate read it all, held for a
      // client that reads nothing: the defect).
      let heldWhilePaused = 0;
      const r = await readSse(`${gw.url}${path}`, body, {
        stopAfterBytes: 1,
        resumeWhen: async () => {
          await until(
            () => paced.done || (paced.blockedSince !== undefined && performance.now() - paced.blockedSince > 1000),
            'the engine blocked on kvgate, or done',
            30_000,
          );
          heldWhilePaused = paced.written;
        },
      });
      expect(paced.done).toBe(true);
      // What the kernel's socket buffers hold on both hops (10 to 20 MB here: they grow up to net.ipv4.tcp_rmem's
      // and tcp_wmem's maxima) and the gateway's own bounded queues (a 64-event engine queue, one batch to the client);
      // a gateway that read on for a client reading nothing would have taken the whole 128 MiB.
      expect(heldWhilePaused).toBeLessThan(paced.total / 2);
      expect(r.ending).toBe('end');
      const deltas = data(r)
        .map((e) => (path === '/v1/messages' ? (e['delta'] as { text?: string } | undefined)?.text : e['delta']))
        .filter((t): t is string => typeof t === 'string');
      expect(deltas).toHaveLength(PACED_DELTAS);
      expect(deltas.every((t, i) => t.startsWith(`${i}:`))).toBe(true);
      expect(data(r).at(-1)!['type']).toBe(path === '/v1/messages' ? 'message_stop' : 'response.completed');
    }, 60_000);
  }

  it('a stream: false answer past 64 MiB is refused with 502 KVG_ERR_ANSWER_TOO_LARGE; the engine cancelled, the booking freed', async () => {
    for (const [path, body] of [
      ['/v1/messages', messages(1000, false)],
      ['/v1/chat/completions', { model: MODEL, max_tokens: 1000, messages: [{ role: 'user', content: 'Hi.' }] }],
    ] as const) {
      const before = engine.requests.length;
      const res = await fetch(`${gw.url}${path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-request-id': 'big' },
        body: JSON.stringify(body),
      });
      expect(res.status).toBe(502);
      const text = await res.text();
      expect(text).toContain('KVG_ERR_ANSWER_TOO_LARGE');
      expect(text).toContain('stream: true');
      expect(text.length).toBeLessThan(4096);
      const leg = engine.requests.slice(before).find((q) => q.method === 'POST')!;
      await leg.closed;
      expect(leg.clientClosed).toBe(true);
      await until(async () => (await metric(gw.url, 'kvgate_worker_active_requests')) === 0, 'the booking freed');
    }
    expect(await metric(gw.url, 'kvgate_router_request_errors_total', { code: 'KVG_ERR_ANSWER_TOO_LARGE' })).toBe(2);
    await until(
      () => jsonLines(gw.proc).filter((o) => o.msg === 'request' && o.code === 'KVG_ERR_ANSWER_TOO_LARGE').length === 2,
      'two access lines with the code',
    );
  }, 60_000);
});
