/**
 * Issue 23, section 2: what engines send that the gateway must not pass on as
 * is. `kvgate serve` (a real process) in front of a misbehaving engine (a real
 * HTTP server on a real socket, test/helpers/http-engine.ts) and a `kvgate
 * mocker` engine:
 *
 * - a 200 with an HTML page (a proxy's) is a 502 KVG_ERR_ENGINE_BAD_RESPONSE
 *   before any byte, streaming or not; unpinned, it is retried on the other
 *   worker and counts toward the worker's ejection, like a 502;
 * - a 4xx with a long message holding an address reaches the client as
 *   kvgate's error object: the engine's status and message, bounded, the
 *   address redacted, none of the engine's headers;
 * - a stream cut inside an event ends with a KVG_ERR_ENGINE_STREAM_BROKEN
 *   error event (a 502 for a `stream: false` client), counted;
 * - CR-only events reach the client as separate events with LF line ends;
 * - an engine's own error event mid-stream (`data: {"error": ...}`, from the
 *   misbehaving engine and from the mocker's `error_after_tokens` fault) is
 *   not passed on: a 4xx code reaches the client as its refusal (redacted),
 *   any other as kvgate's KVG_ERR_ENGINE_FAILED event naming the worker;
 *   counted and logged. Before: the engine's event verbatim, addresses and
 *   all, with the request counted as a success.
 *
 * Before the fix: an empty 200 stream or `{"choices":[]}`, the engine's body
 * verbatim, a clean end without [DONE] (a 200 with part of the answer), and
 * no event at all.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ServerResponse } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  completionChunk,
  sendJson,
  sseEvent,
  sseHead,
  startHttpEngine,
  type HttpEngine,
  type RecordedRequest,
} from '../../helpers/http-engine.js';
import { metric } from '../../helpers/metric-sum.js';
import { jsonLines, startMockerEngine, startServe, stopServed, type ServedProc } from '../../helpers/serve-process.js';
import { readSse } from '../../helpers/sse-reader.js';
import { until } from '../../helpers/until.js';

const HTML =
  '<!DOCTYPE html><html><head><title>502 Bad Gateway</title></head><body><h1>502 Bad Gateway</h1><hr>nginx</body></html>';
const ENGINE_ADDRESS = '10.9.8.7';
const LONG_MESSAGE =
  `This model's maximum context length is 64 tokens. However, you requested 900 tokens. ` +
  `(upstream http://${ENGINE_ADDRESS}:8000/v1/completions, peer ${ENGINE_ADDRESS}:29500) ${'Please reduce the length of the messages. '.repeat(60)}`;

const ENGINE_FAILURE = `CUDA error: an illegal memory access was encountered (rank 0, peer ${ENGINE_ADDRESS}:29500)`;

/** What the misbehaving engine does, by the request id kvgate forwards (x-request-id). */
function misbehave(req: RecordedRequest, res: ServerResponse, model: string): void {
  if (req.method === 'GET') {
    if (req.url === '/v1/models') return sendJson(res, 200, { object: 'list', data: [{ id: model, object: 'model' }] });
    if (req.url === '/health') return void res.end('ok');
    res.writeHead(404).end();
    return;
  }
  const stream = (req.json as { stream?: unknown }).stream === true;
  switch (String(req.headers['x-request-id']).split('-')[0]) {
    case 'html':
      res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' }).end(HTML);
      return;
    case 'refuse':
      sendJson(
        res,
        400,
        { error: { message: LONG_MESSAGE, type: 'BadRequestError', param: 'prompt', code: 400 } },
        { 'x-engine-secret': 'engine-internal-7', server: `uvicorn on ${ENGINE_ADDRESS}` },
      );
      return;
    case 'cut':
      sseHead(res);
      res.write(sseEvent(completionChunk('Hel')));
      res.end('data: {"id":"cmpl-test","object":"text_completion","choices":[{"index":0,"te');
      return;
    case 'cutfinal': {
      // The answer's last chunk, then its usage chunk cut short: the end of the answer is lost.
      const ids = (c: Record<string, unknown>, tokenIds: number[], first: boolean): Record<string, unknown> => ({
        ...c,
        choices: [
          {
            ...(c.choices as object[])[0],
            token_ids: tokenIds,
            ...(first ? { prompt_token_ids: [1, 2, 3, 4, 5, 6, 7, 8] } : {}),
          },
        ],
      });
      sseHead(res);
      res.write(sseEvent(ids(completionChunk('Hel'), [11], true)));
      res.write(sseEvent(ids(completionChunk('lo', 'length'), [12], false)));
      res.end('data: {"id":"cmpl-test","object":"text_completion","choices":[],"usage":{"prompt_tok');
      return;
    }
    case 'engineerror':
      // vLLM's ending of a stream whose generation failed: an error event, then [DONE].
      sseHead(res);
      res.write(sseEvent(completionChunk('Hel')));
      res.write(
        sseEvent({ error: { object: 'error', message: ENGINE_FAILURE, type: 'InternalServerError', code: 500 } }),
      );
      res.end(sseEvent('[DONE]'));
      return;
    case 'refusemid':
      // SGLang refuses some requests after its stream began.
      sseHead(res);
      res.write(sseEvent({ error: { message: LONG_MESSAGE, type: 'BadRequestError', param: 'prompt', code: 400 } }));
      res.end(sseEvent('[DONE]'));
      return;
    case 'garbage':
      // An event whose data is neither JSON nor [DONE] (a broken engine or proxy), between two good ones.
      sseHead(res);
      res.write(sseEvent(completionChunk('Hel')));
      res.write(`data: <html>${ENGINE_ADDRESS} oops</html>\n\n`);
      res.end(sseEvent(completionChunk('lo', 'length')) + sseEvent('[DONE]'));
      return;
    case 'cr':
      sseHead(res);
      res.write(`data: ${JSON.stringify(completionChunk('Hel'))}\r\r`);
      res.end(`data: ${JSON.stringify(completionChunk('lo', 'length'))}\r\rdata: [DONE]\r\r`);
      return;
    default:
      if (!stream)
        return sendJson(res, 200, {
          id: 'x',
          object: 'text_completion',
          choices: [{ index: 0, text: 'ok', finish_reason: 'length' }],
        });
      sseHead(res);
      res.end(sseEvent(completionChunk('ok', 'length')) + sseEvent('[DONE]'));
  }
}

let dir: string;
let misbehaving: HttpEngine;
let mockerUrl: string;
let model: string;
const procs: ServedProc[] = [];

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'kvgate-engine-answers-'));
  const m = await startMockerEngine(['--no-kv-events']);
  procs.push(m.proc);
  mockerUrl = String(m.engine.url);
  model = String(m.engine.model);
  misbehaving = await startHttpEngine((req, res) => misbehave(req, res, model));
}, 60_000);

afterAll(async () => {
  await Promise.all(procs.map((p) => stopServed(p)));
  await misbehaving?.close();
  rmSync(dir, { recursive: true, force: true });
});

/**
 * A gateway over worker 1 (the misbehaving engine) and worker 2 (the mocker), round robin. Its answers count toward
 * its ejection (the last describe), so the suites that pin requests to it turn outlier detection off.
 */
async function gateway(name: string, extra: Record<string, unknown> = {}): Promise<{ proc: ServedProc; url: string }> {
  const config = join(dir, `${name}.json`);
  writeFileSync(
    config,
    JSON.stringify({
      listen: { host: '127.0.0.1', port: 0 },
      preprocess: { threads: 0 },
      log: { level: 'info' },
      ...extra,
      models: [
        {
          name: model,
          router_mode: 'round-robin',
          workers: [
            { id: 1, url: misbehaving.url },
            { id: 2, url: mockerUrl },
          ],
        },
      ],
    }),
  );
  const served = await startServe(config);
  procs.push(served.proc);
  return served;
}

const NO_OUTLIERS = { health: { outlier_detection: { consecutive_errors: 0 } } };

const body = (extra: Record<string, unknown> = {}): Record<string, unknown> => ({
  model,
  prompt: [1, 2, 3, 4, 5, 6, 7, 8],
  max_tokens: 4,
  ...extra,
});

function post(url: string, id: string, payload: Record<string, unknown>, pin?: number): Promise<Response> {
  const headers: Record<string, string> = { 'content-type': 'application/json', 'x-request-id': id };
  if (pin !== undefined) headers['x-worker-instance-id'] = String(pin);
  return fetch(`${url}/v1/completions`, { method: 'POST', headers, body: JSON.stringify(payload) });
}

/** readSse with the request id and a pin on worker 1 (a pinned request is never retried elsewhere). */
function readPinned(url: string, id: string): ReturnType<typeof readSse> {
  return readSse(
    `${url}/v1/completions`,
    body({ stream: true }),
    {},
    { 'x-request-id': id, 'x-worker-instance-id': '1' },
  );
}

describe('engine answers the gateway does not pass on as is (issue 23 section 2)', () => {
  let gw: { proc: ServedProc; url: string };
  beforeAll(async () => {
    gw = await gateway('answers', NO_OUTLIERS);
  }, 60_000);

  it('a 200 with an HTML page is a 502 KVG_ERR_ENGINE_BAD_RESPONSE before any byte, streaming or not; counted and logged', async () => {
    for (const [id, stream] of [
      ['html-stream', true],
      ['html-json', false],
    ] as const) {
      const res = await post(gw.url, id, body({ stream }), 1);
      expect(res.status, id).toBe(502);
      expect(res.headers.get('content-type'), id).toBe('application/json');
      const text = await res.text();
      expect(text, id).not.toContain('<html');
      expect(JSON.parse(text), id).toMatchObject({
        error: { code: 'KVG_ERR_ENGINE_BAD_RESPONSE', message: expect.stringContaining('worker 1') },
      });
    }
    expect(await metric(gw.url, 'kvgate_router_engine_protocol_errors_total', { violation: 'content_type' })).toBe(2);
    await until(
      () =>
        jsonLines(gw.proc).filter((o) => o.msg === 'engine answer broke the protocol' && o.violation === 'content_type')
          .length === 2,
      'the two protocol lines',
    );
    expect(jsonLines(gw.proc).find((o) => o.msg === 'engine answer broke the protocol')).toMatchObject({
      level: 40,
      workerId: 1,
      requestId: expect.stringMatching(/^html-stream~/),
    });
  });

  it("a 4xx reaches the client as kvgate's error object: the engine's status and message, bounded, redacted, no engine header", async () => {
    for (const [id, stream] of [
      ['refuse-stream', true],
      ['refuse-json', false],
    ] as const) {
      const res = await post(gw.url, id, body({ stream }), 1);
      expect(res.status, id).toBe(400);
      expect(res.headers.get('content-type'), id).toBe('application/json');
      expect(res.headers.get('x-kvgate-worker'), id).toBe('1');
      expect(res.headers.get('x-engine-secret'), id).toBeNull();
      for (const [name, value] of res.headers) expect(`${name}: ${value}`, id).not.toContain(ENGINE_ADDRESS);
      const text = await res.text();
      expect(text, id).not.toContain(ENGINE_ADDRESS);
      const { error } = JSON.parse(text) as { error: { message: string; type: string; param: unknown; code: string } };
      expect(error, id).toMatchObject({
        type: 'invalid_request_error',
        param: 'prompt',
        code: 'KVG_ERR_ENGINE_REJECTED',
      });
      expect(
        error.message.startsWith(
          "This model's maximum context length is 64 tokens. However, you requested 900 tokens. (upstream [address], peer [address])",
        ),
        id,
      ).toBe(true);
      expect(Buffer.byteLength(error.message), id).toBeLessThanOrEqual(1024);
      expect(error.message.endsWith(' [truncated by kvgate]'), id).toBe(true);
    }
  });

  it('a stream cut inside an event ends with a KVG_ERR_ENGINE_STREAM_BROKEN error event (a 502 unstreamed); counted', async () => {
    const before = await metric(gw.url, 'kvgate_router_engine_protocol_errors_total', { violation: 'truncated_event' });
    const brokenEvent = {
      error: expect.objectContaining({
        code: 'KVG_ERR_ENGINE_STREAM_BROKEN',
        message: expect.stringContaining('worker 1'),
      }),
    };
    // Cut inside a token's chunk, and cut inside the usage chunk after the answer's last chunk.
    const cut = await readPinned(gw.url, 'cut-stream');
    expect(cut.status).toBe(200);
    expect(cut.events.map((e) => JSON.parse(e) as unknown)).toEqual([
      expect.objectContaining({ choices: [expect.objectContaining({ text: 'Hel' })] }),
      brokenEvent,
    ]);
    const final = await readPinned(gw.url, 'cutfinal-stream');
    expect(final.events.map((e) => (e === '[DONE]' ? e : (JSON.parse(e) as unknown)))).toEqual([
      expect.objectContaining({ choices: [expect.objectContaining({ text: 'Hel' })] }),
      expect.objectContaining({ choices: [expect.objectContaining({ text: 'lo', finish_reason: 'length' })] }),
      brokenEvent,
    ]);
    for (const id of ['cut-json', 'cutfinal-json']) {
      const res = await post(gw.url, id, body(), 1);
      expect(res.status, id).toBe(502);
      expect(await res.json(), id).toMatchObject({ error: { code: 'KVG_ERR_ENGINE_STREAM_BROKEN' } });
    }
    expect(await metric(gw.url, 'kvgate_router_engine_protocol_errors_total', { violation: 'truncated_event' })).toBe(
      before + 4,
    );
  });

  it('a finished answer whose end was cut is not continued elsewhere: no token after its finish_reason', async () => {
    // Unpinned, so migration applies; round robin sends one of the first two requests to worker 1.
    let r: Awaited<ReturnType<typeof readSse>> | undefined;
    for (let i = 0; i < 4 && r?.headers['x-kvgate-worker'] !== '1'; i++)
      r = await readSse(`${gw.url}/v1/completions`, body({ stream: true }), {}, { 'x-request-id': `cutfinal-${i}` });
    expect(r!.headers['x-kvgate-worker']).toBe('1');
    expect(
      r!.events.map((e) =>
        e === '[DONE]' ? e : (JSON.parse(e) as { choices?: { text: string }[]; error?: { code: string } }),
      ),
    ).toEqual([
      expect.objectContaining({ choices: [expect.objectContaining({ text: 'Hel' })] }),
      expect.objectContaining({ choices: [expect.objectContaining({ text: 'lo', finish_reason: 'length' })] }),
      { error: expect.objectContaining({ code: 'KVG_ERR_ENGINE_STREAM_BROKEN' }) },
    ]);
  });

  it('an event whose data is not JSON is not passed on: the stream ends there with KVG_ERR_ENGINE_BAD_RESPONSE; counted', async () => {
    const before = await metric(gw.url, 'kvgate_router_engine_protocol_errors_total', { violation: 'not_json' });
    const r = await readPinned(gw.url, 'garbage-stream');
    expect(r.status).toBe(200);
    expect(r.events.join('\n')).not.toContain(ENGINE_ADDRESS);
    expect(r.events.map((e) => JSON.parse(e) as unknown)).toEqual([
      expect.objectContaining({ choices: [expect.objectContaining({ text: 'Hel' })] }),
      { error: expect.objectContaining({ code: 'KVG_ERR_ENGINE_BAD_RESPONSE' }) },
    ]);
    const res = await post(gw.url, 'garbage-json', body(), 1);
    expect(res.status).toBe(502);
    expect(await res.json()).toMatchObject({ error: { code: 'KVG_ERR_ENGINE_BAD_RESPONSE' } });
    expect(await metric(gw.url, 'kvgate_router_engine_protocol_errors_total', { violation: 'not_json' })).toBe(
      before + 2,
    );
  });

  it('CR-only events reach a client that splits on LF as separate events; the unstreamed answer has every token', async () => {
    const r = await readPinned(gw.url, 'cr-stream');
    expect(r.status).toBe(200);
    expect(
      r.events.map((e) => (e === '[DONE]' ? e : (JSON.parse(e) as { choices: { text: string }[] }).choices[0]!.text)),
    ).toEqual(['Hel', 'lo', '[DONE]']);
    const res = await post(gw.url, 'cr-json', body(), 1);
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ choices: [{ text: 'Hello', finish_reason: 'length' }] });
  });
});

describe("an engine's error event mid-stream", () => {
  let gw: { proc: ServedProc; url: string };
  beforeAll(async () => {
    gw = await gateway('error-events', NO_OUTLIERS);
  }, 60_000);
  const parsed = (events: readonly string[]): unknown[] => events.map((e) => (e === '[DONE]' ? e : JSON.parse(e)));

  it("a 4xx code reaches the client as its refusal, any other as kvgate's KVG_ERR_ENGINE_FAILED naming the worker; counted and logged", async () => {
    const failed = await readPinned(gw.url, 'engineerror-stream');
    expect(failed.status).toBe(200);
    expect(parsed(failed.events)).toEqual([
      expect.objectContaining({ choices: [expect.objectContaining({ text: 'Hel' })] }),
      {
        error: expect.objectContaining({ code: 'KVG_ERR_ENGINE_FAILED', message: expect.stringContaining('worker 1') }),
      },
    ]);
    const refused = await readPinned(gw.url, 'refusemid-stream');
    expect(parsed(refused.events)).toEqual([
      {
        error: expect.objectContaining({
          code: 'KVG_ERR_ENGINE_REJECTED',
          type: 'invalid_request_error',
          param: 'prompt',
          message: expect.stringMatching(
            /^This model's maximum context length is 64 tokens\. .*\(upstream \[address\], peer \[address\]\)/,
          ),
        }),
      },
    ]);
    for (const r of [failed, refused]) {
      expect(r.events.join('\n')).not.toContain(ENGINE_ADDRESS);
      expect(r.events.join('\n')).not.toContain('CUDA');
    }
    // A `stream: false` client: the refusal with the engine's status, the failure as a 502.
    const whole = await post(gw.url, 'refusemid-json', body(), 1);
    expect(whole.status).toBe(400);
    expect(await whole.json()).toMatchObject({ error: { code: 'KVG_ERR_ENGINE_REJECTED', param: 'prompt' } });
    const broke = await post(gw.url, 'engineerror-json', body(), 1);
    expect(broke.status).toBe(502);
    const brokeText = await broke.text();
    expect(JSON.parse(brokeText)).toMatchObject({ error: { code: 'KVG_ERR_ENGINE_FAILED' } });
    expect(brokeText).not.toContain(ENGINE_ADDRESS);
    expect(await metric(gw.url, 'kvgate_router_engine_error_events_total', { kind: 'failed' })).toBe(2);
    expect(await metric(gw.url, 'kvgate_router_engine_error_events_total', { kind: 'refused' })).toBe(2);
    await until(
      () => jsonLines(gw.proc).filter((o) => String(o.msg).startsWith('the engine sent an error event')).length === 4,
      'four error-event lines',
    );
    const line = jsonLines(gw.proc).find((o) => o.msg === 'the engine sent an error event mid-stream (failed)');
    expect(line).toMatchObject({ level: 40, workerId: 1, code: 'KVG_ERR_ENGINE_FAILED', upstreamCode: 500 });
    expect(JSON.stringify(line)).toContain('CUDA error'); // the engine's text is for the log
  });

  it("the mocker's error_after_tokens fault: the tokens sent, then kvgate's error event, not the engine's", async () => {
    const faults = (f: Record<string, unknown>) =>
      fetch(`${mockerUrl}/admin/faults`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(f),
      });
    expect((await faults({ error_after_tokens: 2 })).status).toBe(200);
    try {
      const r = await readSse(
        `${gw.url}/v1/completions`,
        body({ stream: true, max_tokens: 6 }),
        {},
        { 'x-request-id': 'mocker-error', 'x-worker-instance-id': '2' },
      );
      expect(r.status).toBe(200);
      const events = parsed(r.events) as { choices?: unknown[]; error?: { code: string; message: string } }[];
      expect(events.filter((e) => e.choices !== undefined)).toHaveLength(2);
      expect(events.at(-1)!.error).toMatchObject({
        code: 'KVG_ERR_ENGINE_FAILED',
        message: expect.stringContaining('worker 2'),
      });
      expect(r.events.join('\n')).not.toContain('10.0.0.7');
    } finally {
      await faults({ error_after_tokens: null });
    }
  });
});

describe('an HTML 200 counts against the worker like a 502 (issue 23 section 2)', () => {
  it('unpinned, it is retried on the other worker before any byte; three in a row eject the worker', async () => {
    const gw = await gateway('ejection', {
      health: { max_ejected_percent: 50, outlier_detection: { consecutive_errors: 3, base_ejection_ms: 600_000 } },
    });
    const ejected = (): Promise<number> =>
      metric(gw.url, 'kvgate_worker_ejections_total', { worker_id: '1', reason: 'consecutive_errors' });
    for (let i = 0; i < 12 && (await ejected()) === 0; i++) {
      const stream = i % 2 === 0;
      const res = await post(gw.url, `html-${i}`, body({ stream }));
      const text = await res.text();
      expect(res.status, `html-${i}`).toBe(200);
      expect(res.headers.get('x-kvgate-worker'), `html-${i}`).toBe('2');
      expect(text, `html-${i}`).not.toContain('<html');
      if (stream) expect(text.trimEnd().endsWith('data: [DONE]'), `html-${i}`).toBe(true);
      else expect((JSON.parse(text) as { choices: unknown[] }).choices, `html-${i}`).toHaveLength(1);
    }
    expect(await ejected()).toBe(1);
    expect(await metric(gw.url, 'kvgate_router_retries_total', { reason: 'KVG_ERR_ENGINE_BAD_RESPONSE' })).toBe(3);
    expect(await metric(gw.url, 'kvgate_router_engine_protocol_errors_total', { violation: 'content_type' })).toBe(3);
    await until(
      () => jsonLines(gw.proc).some((o) => o.workerId === 1 && String(o.msg).includes('ejected for')),
      'the ejection line',
    );
  }, 60_000);
});
