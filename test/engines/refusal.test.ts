/**
 * Issue 23 item 2: what a client is told of an engine's 4xx. kvgate's error
 * object with the engine's message (bounded, addresses out), never the
 * engine's body as it came.
 */
import { describe, expect, it } from 'vitest';
import { EngineClient, EngineHttpError, refusalBody } from '../../src/engines/index.js';
import { REFUSAL_MESSAGE_MAX_BYTES, redactAddresses, redactPaths } from '../../src/engines/refusal.js';
import { sendJson, startHttpEngine } from '../helpers/http-engine.js';

const WORKER = 'http://vllm-3.gpu.internal:8000';
const body = (json: unknown, status = 400, text?: string): ReturnType<typeof refusalBody> =>
  refusalBody({ status, json, text, worker: WORKER }, 3);

describe('refusalBody', () => {
  it("carries the engine message of each error shape vLLM, SGLang and FastAPI answer with, under kvgate's code", () => {
    const message = "This model's maximum context length is 64 tokens.";
    const cases: [unknown, string | null][] = [
      [{ error: { message, type: 'BadRequestError', param: 'messages', code: 400 } }, 'messages'],
      [{ object: 'error', message, type: 'BadRequestError', code: 400 }, null],
      [{ error: message }, null],
      [{ detail: message }, null],
    ];
    for (const [json, param] of cases) {
      expect(body(json)).toEqual({
        error: { message, type: 'invalid_request_error', param, code: 'KVG_ERR_ENGINE_REJECTED' },
      });
    }
    expect(
      body(
        {
          detail: [
            { loc: ['body', 'max_tokens'], msg: 'Input should be greater than 0' },
            { loc: ['body'], msg: 'bad' },
          ],
        },
        422,
      ).error.message,
    ).toBe('max_tokens: Input should be greater than 0; bad');
    expect(body(undefined, 403, 'forbidden by policy\n').error.message).toBe('forbidden by policy');
  });

  it("an answer without a message (a proxy page, a body cut short) gets kvgate's sentence naming the worker and status", () => {
    expect(body(undefined, 413).error).toEqual({
      message: 'the engine of worker 3 refused the request (HTTP 413)',
      type: 'invalid_request_error',
      param: null,
      code: 'KVG_ERR_ENGINE_REJECTED',
    });
    expect(body({ error: { message: '   ' } }).error.message).toBe(
      'the engine of worker 3 refused the request (HTTP 400)',
    );
    expect(body({ unrelated: true }).error.message).toBe('the engine of worker 3 refused the request (HTTP 400)');
  });

  it('passes the engine param only when it reads as a field name', () => {
    expect(body({ error: { message: 'x', param: 'messages[0].content' } }).error.param).toBe('messages[0].content');
    expect(body({ error: { message: 'x', param: 'see http://10.0.0.1:8000/' } }).error.param).toBeNull();
    expect(body({ error: { message: 'x', param: 7 } }).error.param).toBeNull();
  });

  it("redacts URLs, IP literals, host:port and the worker's own host however written", () => {
    const said = [
      'upstream http://10.1.2.3:8000/v1/completions failed',
      'peer 192.168.0.7:29500',
      'ipv4 10.0.0.9',
      'v6 [fd00::12]:8000',
      'svc vllm-0.vllm.default.svc.cluster.local:8000',
      'local localhost:8000',
      'self VLLM-3.gpu.internal and vllm-3.gpu.internal:8000',
      'grpc://decode-1:7000',
      '(see http://h.example/x/y?z=1), then ws://10.0.0.1:9.',
      'kept: max_tokens must be <= 4096',
      'nixl prefill-0:5600 and vllm:8000 refused',
      'kept: max_tokens:4096 at 12:30, code:7',
    ].join(' | ');
    expect(redactAddresses(said, WORKER)).toBe(
      [
        'upstream [address] failed',
        'peer [address]',
        'ipv4 [address]',
        'v6 [address]',
        'svc [address]',
        'local [address]',
        'self [address] and [address]',
        '[address]',
        '(see [address]), then [address].',
        'kept: max_tokens must be <= 4096',
        'nixl [address] and [address] refused',
        'kept: max_tokens:4096 at 12:30, code:7',
      ].join(' | '),
    );
    // A bare short host name is the worker's own only when it is its host.
    expect(redactAddresses('reach decode-1 at decode-1:8000', 'http://decode-1:8000')).toBe(
      'reach [address] at [address]',
    );
    expect(redactAddresses('reach decode-1', WORKER)).toBe('reach decode-1');
  });

  it('takes out a stack trace (keeping the exception line) and replaces absolute file paths by [path]', () => {
    const python = [
      'prompt is too long',
      'Traceback (most recent call last):',
      '  File "/opt/vllm/entrypoints/openai/serving_chat.py", line 512, in create_chat_completion',
      '    raise ValueError(msg)',
      'ValueError: 900 tokens > 64',
    ].join('\n');
    expect(body({ error: { message: python } }).error.message).toBe(
      'prompt is too long\nValueError: 900 tokens > 64 [stack trace removed by kvgate]',
    );
    const js = 'bad request\n    at Object.parse (/srv/engine/dist/server.js:12:7)\n    at node:internal/main:3:1';
    expect(body({ error: { message: js } }).error.message).toBe('bad request [stack trace removed by kvgate]');
    expect(body({ detail: 'model /models/llama-3 has no tokenizer at C:\\engines\\tok.json' }).error.message).toBe(
      'model [path] has no tokenizer at [path]',
    );
    // The client's own vocabulary is kept: API paths, one segment, a slash inside a word.
    const kept = 'use /v1/completions or /generate; and/or 12 tokens/s; auto/none';
    expect(redactPaths(kept)).toBe(kept);
    expect(body({ error: { message: kept } }).error.message).toBe(kept);
  });

  it('bounds the message to 1 KB of UTF-8 with a marker, on a character boundary, after redaction', () => {
    const long = `prompt too long: ${'日本語'.repeat(400)} at http://10.9.9.9:8000/generate`;
    const m = body({ error: { message: long } }).error.message;
    expect(Buffer.byteLength(m)).toBeLessThanOrEqual(REFUSAL_MESSAGE_MAX_BYTES);
    expect(Buffer.byteLength(m)).toBeGreaterThan(REFUSAL_MESSAGE_MAX_BYTES - 3);
    expect(m.startsWith('prompt too long: 日本語')).toBe(true);
    expect(m.endsWith(' [truncated by kvgate]')).toBe(true);
    expect(m).not.toContain('\uFFFD');
    // An address straddling the bound is removed whole, not cut into a prefix that escapes redaction.
    const straddling = `${'x'.repeat(990)} http://10.20.30.40:8000/v1`;
    expect(body({ error: { message: straddling } }).error.message).not.toMatch(/10\.20|http/);
    const exact = 'y'.repeat(REFUSAL_MESSAGE_MAX_BYTES);
    expect(body({ error: { message: exact } }).error.message).toBe(exact);
  });
});

describe('EngineHttpError.refusal', () => {
  it("reads the engine's answer: JSON parsed, plain text kept, anything else (HTML) gives no message", async () => {
    const e = await startHttpEngine((req, res) => {
      if (req.url === '/json') return sendJson(res, 400, { error: { message: 'bad max_tokens' } });
      res.writeHead(req.url === '/text' ? 422 : 403, {
        'content-type': req.url === '/text' ? 'text/plain; charset=utf-8' : 'text/html',
      });
      res.end(req.url === '/text' ? 'max_tokens must be positive' : '<html><body>403 Forbidden</body></html>');
    });
    const c = new EngineClient();
    c.addWorker(e.url);
    try {
      const refused = async (path: string): Promise<EngineHttpError> =>
        c.dispatch(e.url, path, {}).then(
          () => {
            throw new Error('expected a refusal');
          },
          (err: unknown) => err as EngineHttpError,
        );
      expect(refusalBody((await refused('/json')).refusal, 1).error.message).toBe('bad max_tokens');
      expect(refusalBody((await refused('/text')).refusal, 1).error.message).toBe('max_tokens must be positive');
      expect(refusalBody((await refused('/html')).refusal, 1).error.message).toBe(
        'the engine of worker 1 refused the request (HTTP 403)',
      );
      expect((await refused('/json')).refusal).toMatchObject({ status: 400, worker: e.url });
    } finally {
      await c.close({ force: true });
      await e.close();
    }
  });
});
