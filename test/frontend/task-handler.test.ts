/**
 * An unexpected failure while preprocessing (a bug: a TypeError, not a
 * KvgateError) on a pool thread or on the main thread: the client is
 * answered KVG_ERR_INTERNAL with the fixed sentence the main thread's own
 * failures get, never the thrown text; the log line has the error as it was
 * thrown, its stack from the thread included. The failure is the handler's
 * test hook, KVGATE_TEST_PREPROCESS_FAILURE (task-handler.ts).
 */
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { KvgateError } from '../../src/errors/index.js';
import { UNEXPECTED_FAILURE, workerError } from '../../src/frontend/preprocess/protocol.js';
import { errorOf } from '../../src/frontend/preprocess/task-handler.js';
import { FakeRouter } from './fake-router.js';
import { largeBodyConfig, post, startPoolGateway, type PoolGateway } from './server-harness.js';

const THROWN = 'messages.find is not a function (a thrown secret: /srv/kvgate/internal)';

/** A gateway whose preprocessing throws THROWN, on one pool thread (every body and prompt sent there) or inline. */
async function failing(threads: number): Promise<{ g: PoolGateway; lines: Record<string, any>[] }> {
  const lines: Record<string, any>[] = [];
  const logger = pino({ level: 'info' }, { write: (line: string) => void lines.push(JSON.parse(line)) });
  process.env.KVGATE_TEST_PREPROCESS_FAILURE = THROWN;
  try {
    const pre = { threads, inlineMaxBodyBytes: -1, inlineMaxChars: -1 };
    const config = largeBodyConfig();
    const g = await startPoolGateway(config, new FakeRouter({ model: 'demo', workerIds: [1] }), pre, undefined, logger);
    return { g, lines };
  } finally {
    delete process.env.KVGATE_TEST_PREPROCESS_FAILURE;
  }
}

const fixed = (reqId: string): string => `internal error; the gateway log has the details under request id ${reqId}`;

describe('an unexpected failure while preprocessing', () => {
  it("crosses the thread boundary with its message and stack as the error's cause, not as its message", () => {
    const thrown = new TypeError(THROWN);
    const e = errorOf(workerError(thrown));
    expect(e).toBeInstanceOf(KvgateError);
    expect(e.code).toBe('KVG_ERR_INTERNAL');
    expect(e.message).toBe(UNEXPECTED_FAILURE);
    const cause = e.cause as Error;
    expect(cause.name).toBe('TypeError');
    expect(cause.message).toBe(THROWN);
    expect(cause.stack).toBe(thrown.stack);
  });

  for (const threads of [1, 0]) {
    it(`reaches the client as the fixed sentence, the log as thrown (${threads === 1 ? 'a pool thread' : 'the main thread'})`, async () => {
      const { g, lines } = await failing(threads);
      try {
        const requests: [string, Record<string, unknown>][] = [
          ['/v1/chat/completions', { model: 'demo', messages: [{ role: 'user', content: 'hi' }] }],
          ['/v1/messages', { model: 'demo', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }] }],
          ['/v1/completions', { model: 'demo', prompt: 'hi' }],
        ];
        for (const [path, body] of requests) {
          const r = await post(`${g.url}${path}`, body);
          const reqId = r.headers.get('x-request-id')!;
          expect(r.status).toBe(500);
          expect(r.json.error).toMatchObject({ code: 'KVG_ERR_INTERNAL', message: fixed(reqId) });
          expect(JSON.stringify(r.json)).not.toContain('find is not a function');
          expect(JSON.stringify(r.json)).not.toContain('/srv/kvgate');
          const logged = lines.find((l) => l.msg === 'internal error' && l.reqId === reqId);
          expect(logged?.err.message).toContain(THROWN);
          // The stack where it was thrown: the task handler, on the thread that ran it.
          expect(logged?.err.stack).toMatch(
            new RegExp(`TypeError: ${THROWN.replace(/[()/]/g, '\\$&')}\\n\\s+at .*task-handler`),
          );
        }
      } finally {
        await g.close();
      }
    }, 60_000);
  }
});
