/**
 * PushRouter on its own, up to the answer's start: a real router (a real
 * KvRouter in KV mode, the real selectors, guard and retry) in front of the
 * engine double (push-pool.ts), on a manual clock and seeded RNGs. Every path
 * ends with the bookkeeping back at zero: the scheduler's `free` called exactly
 * once per booking, `markPrefillCompleted` at the first token. A streamed leg
 * that ends normally, retry before the first byte, an engine refusal, JSON answers.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { isKvgateError, KvgateError, type KvgateErrorCode } from '../../../src/errors/index.js';
import type { LegResponse } from '../../../src/routing/push/types.js';
import { completionChunk, usageChunk, type Dispatch } from './fake-engine.js';
import { MODEL, PROMPT, rejection } from './push-fixtures.js';
import {
  closePools,
  count,
  drain,
  endedWithin,
  expectIdle,
  idOf,
  leg,
  pool,
  sseOf,
  textsOf,
  WORKER_IDS,
} from './push-pool.js';

afterEach(closePools);

describe('PushRouter: a streamed leg', () => {
  it('books, dispatches streaming with usage, marks prefill done at the first token and frees once at the end', async () => {
    const p = pool();
    const req = leg(p);
    const pending = p.push.dispatch(req);
    const d = await p.engine.call(0);
    const slot = { workerId: idOf(d), dpRank: 0 };
    expect(p.push.activeRequests(slot)).toBe(1);
    expect(p.push.inflight).toBe(1);
    expect(d.path).toBe('/v1/completions');
    expect(d.options.stream).toBe(true);
    expect(d.sentBody).toMatchObject({ stream: true, stream_options: { include_usage: true } });
    expect(d.options.headers?.['x-request-id']).toBe(req.requestId);
    const s = d.answerStream();
    const it = sseOf(await pending)[Symbol.asyncIterator]();

    s.send(completionChunk(''));
    expect(JSON.parse((await it.next()).value!.data).choices[0].text).toBe('');
    expect(p.prefillDone).not.toHaveBeenCalled();
    s.send(completionChunk('a'));
    await it.next();
    expect(p.prefillDone.mock.calls).toEqual([[req.requestId]]);
    // As engines send them: the last chunk, the usage chunk and [DONE] in one read.
    s.send(completionChunk('b', { finish: 'length' }), usageChunk(10, 2), '[DONE]');
    const rest: string[] = [(await it.next()).value!.data];
    s.end();
    for (let r = await it.next(); r.done !== true; r = await it.next()) rest.push(r.value.data);
    // The usage chunk kvgate asked for on the client's behalf is read, not passed on.
    expect(rest.map((x) => (x === '[DONE]' ? x : JSON.parse(x).choices[0].text))).toEqual(['b', '[DONE]']);
    expect(p.prefillDone).toHaveBeenCalledTimes(1);
    expect(p.free.mock.calls).toEqual([[req.requestId, slot]]);
    expect(s.cancelled).toBe(false);
    expectIdle(p);
  });

  // An engine whose loop hangs sends a stream's head and then nothing: the head is no success (outlier detection).
  it("tells outlier detection a stream's outcome at its end, not at its head: an answer, or why it failed", async () => {
    const p = pool();
    const ok = p.push.dispatch(leg(p));
    const d = await p.engine.call(0);
    const s = d.answerStream();
    const res = await ok;
    expect(p.outcomes).toEqual([]);
    s.send(completionChunk('a', { finish: 'stop' }), '[DONE]');
    s.end();
    await drain(res);
    expect(p.outcomes).toEqual([[idOf(d), undefined]]);

    const broken = p.push.dispatch(leg(p));
    const d2 = await p.engine.call(1);
    const s2 = d2.answerStream();
    const res2 = await broken;
    s2.fail(new KvgateError('KVG_ERR_ENGINE_FIRST_BYTE_TIMEOUT', 'no output', { migratable: true, phase: 'body' }));
    expect(isKvgateError((await drain(res2)).error, 'KVG_ERR_ENGINE_FIRST_BYTE_TIMEOUT')).toBe(true);
    expect(p.outcomes.at(-1)).toEqual([idOf(d2), 'KVG_ERR_ENGINE_FIRST_BYTE_TIMEOUT']);
    expectIdle(p);
  });

  it('in a simple mode the pool counts each leg on its slot and returns each exactly once', async () => {
    const p = pool({ mode: 'least-loaded' });
    const a = leg(p, { routing: { backendInstanceId: 2 } });
    const b = leg(p, { routing: { backendInstanceId: 2 } });
    const [ra, rb] = [p.push.dispatch(a), p.push.dispatch(b)];
    const [da, db] = [await p.engine.call(0), await p.engine.call(1)];
    const [sa, sb] = [da.answerStream(), db.answerStream()];
    const [resA, resB] = [await ra, await rb];
    expect(p.push.activeRequests({ workerId: 2, dpRank: 0 })).toBe(2);
    sa.send(completionChunk('a', { finish: 'stop' }), '[DONE]');
    sa.end();
    await drain(resA);
    // A second release of leg a would take leg b's count with it.
    expect(p.push.activeRequests({ workerId: 2, dpRank: 0 })).toBe(1);
    sb.send(completionChunk('b', { finish: 'stop' }), '[DONE]');
    sb.end();
    await drain(resB);
    expectIdle(p);
  });
});

describe('PushRouter: retry before the first byte', () => {
  it('an unreachable worker: counted, its booking freed, the leg booked and sent on another worker', async () => {
    const p = pool();
    const req = leg(p);
    const pending = p.push.dispatch(req);
    const first = await p.engine.call(0);
    const a = { workerId: idOf(first), dpRank: 0 };
    first.unreachable();
    const second = await p.engine.call(1);
    const b = { workerId: idOf(second), dpRank: 0 };
    expect(b.workerId).not.toBe(a.workerId);
    expect(p.free.mock.calls).toEqual([[req.requestId, a]]);
    expect(p.push.activeRequests(a)).toBe(0);
    expect(p.push.activeRequests(b)).toBe(1);
    expect(p.unreachable).toEqual([a.workerId]);
    expect(await count(p, 'kvgate_router_retries_total', { reason: 'KVG_ERR_ENGINE_UNREACHABLE' })).toBe(1);
    const s = second.answerStream();
    s.send(completionChunk('a', { finish: 'stop' }), '[DONE]');
    s.end();
    expect(textsOf((await drain(await pending)).data)).toEqual(['a']);
    expect(p.free.mock.calls).toEqual([
      [req.requestId, a],
      [req.requestId, b],
    ]);
    expectIdle(p);
  });

  it('exhausted: maxRetries + 1 workers tried, each freed once, the last failure thrown', async () => {
    const p = pool({ maxRetries: 2 });
    const pending = p.push.dispatch(leg(p));
    const outcome = rejection(pending);
    for (let n = 0; n < 3; n++) (await p.engine.call(n)).answerStatus(503, 'overloaded');
    const err = await outcome;
    expect(isKvgateError(err, 'KVG_ERR_ENGINE_FAILED')).toBe(true);
    expect(new Set(p.engine.calls.map(idOf)).size).toBe(3);
    expect(p.free).toHaveBeenCalledTimes(3);
    expect(await count(p, 'kvgate_router_retries_total', { reason: 'engine_503' })).toBe(2);
    expect(await count(p, 'kvgate_router_request_errors_total', { code: 'KVG_ERR_ENGINE_FAILED' })).toBe(1);
    expectIdle(p);
  });

  it('no worker left to retry on: the client hears the failure, not the empty pool', async () => {
    const p = pool({ maxRetries: 5 });
    const outcome = rejection(p.push.dispatch(leg(p)));
    for (let n = 0; n < WORKER_IDS.length; n++) (await p.engine.call(n)).unreachable();
    expect(isKvgateError(await endedWithin(p, outcome, 3), 'KVG_ERR_ENGINE_UNREACHABLE')).toBe(true);
    expect(p.engine.calls).toHaveLength(3);
    expect(p.free).toHaveBeenCalledTimes(3);
    expectIdle(p);
  });

  it('a pinned leg is not retried elsewhere', async () => {
    const p = pool();
    const outcome = rejection(p.push.dispatch(leg(p, { routing: { backendInstanceId: 3 } })));
    const d = await p.engine.call(0);
    expect(idOf(d)).toBe(3);
    d.unreachable();
    expect(isKvgateError(await endedWithin(p, outcome, 1), 'KVG_ERR_ENGINE_UNREACHABLE')).toBe(true);
    expect(p.engine.calls).toHaveLength(1);
    expect(p.free).toHaveBeenCalledTimes(1);
    expect(await count(p, 'kvgate_router_retries_total')).toBe(0);
    expectIdle(p);
  });

  const cases: [string, (d: Dispatch) => void, 'retried' | KvgateErrorCode][] = [
    [
      'connection reset after sending',
      (d) => d.fail(new KvgateError('KVG_ERR_ENGINE_DISCONNECTED', 'reset')),
      'retried',
    ],
    ['an engine 502', (d) => d.answerStatus(502, 'bad gateway'), 'retried'],
    ['an engine 501', (d) => d.answerStatus(501, 'not implemented'), 'KVG_ERR_ENGINE_FAILED'],
    [
      'an answer that is not SSE',
      (d) => d.fail(new KvgateError('KVG_ERR_ENGINE_BAD_RESPONSE', 'html')),
      'KVG_ERR_ENGINE_BAD_RESPONSE',
    ],
  ];
  it.each(cases)('%s: retried elsewhere only when migratable', async (_what, failWith, thrown) => {
    const p = pool();
    const pending = p.push.dispatch(leg(p));
    const outcome = rejection(pending);
    failWith(await p.engine.call(0));
    if (thrown === 'retried') {
      const s = (await p.engine.call(1)).answerStream();
      s.send(completionChunk('a', { finish: 'stop' }), '[DONE]');
      s.end();
      await drain((await pending) as LegResponse);
      expect(await count(p, 'kvgate_router_retries_total')).toBe(1);
    } else {
      expect(isKvgateError(await endedWithin(p, outcome, 1), thrown)).toBe(true);
      expect(p.engine.calls).toHaveLength(1);
    }
    expect(p.free).toHaveBeenCalledTimes(p.engine.calls.length);
    expectIdle(p);
  });
});

describe('PushRouter: an engine refusal and a JSON answer', () => {
  it('an engine 4xx is the answer: its status and message in kvgate error object, no address, not retried', async () => {
    const p = pool();
    const pending = p.push.dispatch(leg(p));
    const d = await p.engine.call(0);
    d.answerStatus(400, `prompt too long for ${d.url}`);
    const res = await pending;
    expect(res.status).toBe(400);
    expect(res.body.kind).toBe('json');
    const json = res.body.kind === 'json' ? res.body.json : undefined;
    expect(json).toMatchObject({ error: { code: 'KVG_ERR_ENGINE_REJECTED', type: 'invalid_request_error' } });
    expect(JSON.stringify(json)).toContain('prompt too long');
    expect(JSON.stringify(json)).not.toContain('engine-');
    expect(p.engine.calls).toHaveLength(1);
    expect(p.free).toHaveBeenCalledTimes(1);
    expect(await count(p, 'kvgate_router_retries_total')).toBe(0);
    expectIdle(p);
  });

  it('a client that asked for no stream: the leg streams, the answer is assembled, freed once', async () => {
    const p = pool();
    const req = leg(p, { stream: false, body: { model: MODEL, prompt: PROMPT, max_tokens: 2, stream: false } });
    const pending = p.push.dispatch(req);
    const d = await p.engine.call(0);
    expect(d.options.stream).toBe(true);
    expect(d.sentBody).toMatchObject({ stream: true, stream_options: { include_usage: true } });
    const s = d.answerStream();
    s.send(completionChunk('a'));
    s.send(completionChunk('b', { finish: 'length' }), usageChunk(10, 2), '[DONE]');
    s.end();
    const res = await pending;
    expect(res.body.kind).toBe('json');
    const json = (res.body.kind === 'json' ? res.body.json : {}) as { choices: { text: string }[]; usage: unknown };
    expect(json.choices[0]!.text).toBe('ab');
    expect(json.usage).toMatchObject({ prompt_tokens: 10, completion_tokens: 2 });
    expect(p.prefillDone.mock.calls).toEqual([[req.requestId]]);
    expect(p.free).toHaveBeenCalledTimes(1);
    expectIdle(p);
  });

  it('a leg sent unstreamed (a one-token prefill) gets a JSON answer: prompt done, freed once', async () => {
    const p = pool();
    const req = leg(p, { legFields: { fields: { stream: false, max_tokens: 1 }, headers: {} } });
    const pending = p.push.dispatch(req);
    const d = await p.engine.call(0);
    expect(d.options.stream).toBe(false);
    expect(p.free).not.toHaveBeenCalled();
    d.answerJson({ id: 'cmpl-1', choices: [{ index: 0, text: 'x', finish_reason: 'length' }] });
    const res = await pending;
    expect(res.body.kind).toBe('json');
    expect(p.prefillDone.mock.calls).toEqual([[req.requestId]]);
    expect(p.free).toHaveBeenCalledTimes(1);
    expectIdle(p);
  });
});
