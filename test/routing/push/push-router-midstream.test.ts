/**
 * PushRouter on its own, once the answer started: a failure after the first
 * byte (migrated, or the error after the events, per migration.ts), the
 * client leaving before, during and after dispatch, and a worker removed while
 * its leg runs; each path ends with the bookkeeping back at zero (push-pool.ts).
 */
import { afterEach, describe, expect, it } from 'vitest';
import { isKvgateError } from '../../../src/errors/index.js';
import { completionChunk, usageChunk } from './fake-engine.js';
import { PROMPT, rejection } from './push-fixtures.js';
import {
  broken,
  closePools,
  count,
  endedWithin,
  expectIdle,
  idOf,
  leg,
  pool,
  streaming,
  textsOf,
  worker,
} from './push-pool.js';

afterEach(closePools);

describe('PushRouter: a failure after the first byte', () => {
  it('migration on: the failed leg freed, the continuation booked on another worker, one answer to the client', async () => {
    const p = pool({ migration: { limit: 1 } });
    const req = leg(p);
    const { d, s, it, slot } = await streaming(p, req);
    expect(d.sentBody['return_token_ids']).toBe(true);
    s.fail(broken(d));
    const rest = rejection(
      (async () => {
        const out: string[] = [];
        for (let r = await it.next(); r.done !== true; r = await it.next()) out.push(r.value.data);
        return out;
      })(),
    );
    const next = await p.engine.call(1);
    expect(idOf(next)).not.toBe(slot.workerId);
    expect(p.free.mock.calls).toEqual([[req.requestId, slot]]);
    expect(next.path).toBe('/v1/completions');
    expect(next.sentBody).toMatchObject({ prompt: [...PROMPT, 501], max_tokens: 3 });
    const s2 = next.answerStream();
    s2.send(completionChunk('b', { tokenIds: [502], finish: 'length' }), usageChunk(11, 1), '[DONE]');
    s2.end();
    await rest;
    expect(p.free.mock.calls).toEqual([
      [req.requestId, slot],
      [req.requestId, { workerId: idOf(next), dpRank: 0 }],
    ]);
    expect(p.prefillDone).toHaveBeenCalledTimes(2);
    expect(await count(p, 'kvgate_router_migrations_total', { outcome: 'started' })).toBe(1);
    expect(await count(p, 'kvgate_router_migrations_total', { outcome: 'succeeded' })).toBe(1);
    expect(await count(p, 'kvgate_router_retries_total')).toBe(0);
    expectIdle(p);
  });

  it('migration off: the events received, then the error; nothing retried once output reached the client', async () => {
    const p = pool();
    const req = leg(p);
    const { d, s, it } = await streaming(p, req);
    s.send(completionChunk('b', { tokenIds: [502] }));
    s.fail(broken(d));
    expect(textsOf([(await it.next()).value!.data])).toEqual(['b']);
    expect(isKvgateError(await rejection(it.next()), 'KVG_ERR_ENGINE_STREAM_BROKEN')).toBe(true);
    expect(p.engine.calls).toHaveLength(1);
    expect(p.free).toHaveBeenCalledTimes(1);
    expect(await count(p, 'kvgate_router_retries_total')).toBe(0);
    expectIdle(p);
  });

  it('a pinned request is not migrated: skipped, counted, the error to the client', async () => {
    const p = pool({ migration: { limit: 2 } });
    const { d, s, it } = await streaming(p, leg(p, { routing: { backendInstanceId: 1 } }));
    s.fail(broken(d));
    expect(isKvgateError(await rejection(it.next()), 'KVG_ERR_ENGINE_STREAM_BROKEN')).toBe(true);
    expect(await count(p, 'kvgate_router_migrations_skipped_total', { reason: 'pinned' })).toBe(1);
    expect(p.warnings.some((w) => w['reason'] === 'pinned')).toBe(true);
    expect(p.engine.calls).toHaveLength(1);
    expect(p.free).toHaveBeenCalledTimes(1);
    expectIdle(p);
  });

  it('a stream cut inside an event: a protocol violation, counted and logged, the booking freed once', async () => {
    const p = pool();
    const { s, it } = await streaming(p, leg(p));
    s.sendRaw('data: {"id":"cmpl-1","choi');
    s.end();
    const err = await rejection(it.next());
    expect(isKvgateError(err, 'KVG_ERR_ENGINE_STREAM_BROKEN')).toBe(true);
    expect(await count(p, 'kvgate_router_engine_protocol_errors_total', { violation: 'truncated_event' })).toBe(1);
    expect(p.warnings.filter((w) => w['violation'] === 'truncated_event')).toHaveLength(1);
    expect(p.free).toHaveBeenCalledTimes(1);
    expectIdle(p);
  });
});

describe('PushRouter: the client leaving', () => {
  it('before dispatch: nothing booked, nothing sent', async () => {
    const p = pool();
    const req = leg(p);
    req.signal.abort(new Error('gone'));
    expect(isKvgateError(await rejection(p.push.dispatch(req)), 'KVG_ERR_CLIENT_ABORTED')).toBe(true);
    expect(p.engine.calls).toHaveLength(0);
    expect(p.free).not.toHaveBeenCalled();
    expectIdle(p);
  });

  it('before dispatch with a booked selection: the booking is freed once, nothing sent', async () => {
    const p = pool();
    const req = leg(p);
    const sel = await p.push.select(req, 'book');
    expect(p.push.activeRequests(sel.slot)).toBe(1);
    req.signal.abort(new Error('gone'));
    expect(isKvgateError(await rejection(p.push.dispatch(req, sel)), 'KVG_ERR_CLIENT_ABORTED')).toBe(true);
    expect(p.engine.calls).toHaveLength(0);
    expect(p.free.mock.calls).toEqual([[req.requestId, sel.slot]]);
    expectIdle(p);
  });

  it('during dispatch: the dispatch fails, not retried, freed once', async () => {
    const p = pool();
    const req = leg(p);
    const outcome = rejection(p.push.dispatch(req));
    await p.engine.call(0);
    req.signal.abort(new Error('gone'));
    expect(isKvgateError(await endedWithin(p, outcome, 1), 'KVG_ERR_CLIENT_ABORTED')).toBe(true);
    expect(p.engine.calls).toHaveLength(1);
    expect(p.free).toHaveBeenCalledTimes(1);
    expect(await count(p, 'kvgate_router_retries_total')).toBe(0);
    expectIdle(p);
  });

  it.each([0, 1])(
    'mid-stream, the reader stops (return()): freed once, upstream cancelled (migration limit %i)',
    async (limit) => {
      const p = pool({ migration: { limit } });
      const { s, it } = await streaming(p, leg(p));
      await it.return!();
      expect(s.cancelled).toBe(true);
      expect(p.free).toHaveBeenCalledTimes(1);
      expect(p.engine.calls).toHaveLength(1);
      expectIdle(p);
    },
  );

  it('mid-stream, the signal fires: the reader gets CLIENT_ABORTED, not migrated, freed once', async () => {
    const p = pool({ migration: { limit: 1 } });
    const req = leg(p);
    const { s, it } = await streaming(p, req);
    s.send(completionChunk('b', { tokenIds: [502] }));
    req.signal.abort(new Error('gone'));
    expect(isKvgateError(await rejection(it.next()), 'KVG_ERR_CLIENT_ABORTED')).toBe(true);
    expect(p.engine.calls).toHaveLength(1);
    expect(p.free).toHaveBeenCalledTimes(1);
    expectIdle(p);
  });
});

describe('PushRouter: membership', () => {
  it.each(['kv', 'round-robin'] as const)(
    '%s: a worker removed while its leg runs; the leg ends freed once, nothing left behind',
    async (mode) => {
      const p = pool({ mode });
      const req = leg(p);
      const { s, it, slot } = await streaming(p, req);
      p.push.removeWorker(slot.workerId);
      expect(p.push.worker(slot.workerId)).toBeUndefined();
      s.send(completionChunk('b', { finish: 'stop' }), '[DONE]');
      s.end();
      for (let r = await it.next(); r.done !== true; r = await it.next());
      if (mode === 'kv') expect(p.free.mock.calls).toEqual([[req.requestId, slot]]);
      expectIdle(p);
      // Back in the pool, the worker carries no load from the leg that outlived its first membership.
      p.push.addWorker(worker(slot.workerId));
      const again = leg(p, { routing: { backendInstanceId: slot.workerId } });
      const pending = p.push.dispatch(again);
      await p.engine.call(1);
      expect(p.push.activeRequests(slot)).toBe(1);
      p.engine.calls[1]!.answerStatus(400, 'no');
      await pending;
      expectIdle(p);
    },
  );
});
