/** Spec 1.4 step 2: a session's requests stick to one worker (aggregated), with a sliding TTL and close. */
import { afterEach, describe, expect, it } from 'vitest';
import { ManualClock, seededRng } from '../../../src/common/index.js';
import { drain, prepare, randomTokens, startFleet, type Fleet } from '../../helpers/fleet.js';

describe('sticky sessions (aggregated)', () => {
  let fleet: Fleet | undefined;
  afterEach(async () => {
    await fleet?.close();
    fleet = undefined;
  });
  const rng = seededRng(8);
  const hints = (id: string, extra: { action?: 'open' | 'close'; timeoutSecs?: number } = {}) => ({
    annotations: [],
    session: { id, ...extra },
  });

  it('binds a session to its first worker, slides its TTL, and unbinds on close, expiry or worker loss', async () => {
    const clock = new ManualClock(1_000);
    fleet = await startFleet(4, { kvEvents: false, router: { mode: 'round-robin', clock } });
    const f = fleet;
    const send = async (h: ReturnType<typeof hints> | undefined): Promise<number> => {
      const res = await f.router.route(prepare(randomTokens(rng, 40), h === undefined ? {} : { hints: h }));
      await drain(res);
      return res.worker.workerId;
    };
    const first = await send(hints('s1'));
    // Round-robin would move on; the session stays.
    for (let i = 0; i < 5; i++) expect(await send(hints('s1'))).toBe(first);
    expect(await send(undefined)).not.toBe(first);
    // Sliding TTL (default 300 s): used within the window, it stays bound.
    clock.advance(200_000);
    expect(await send(hints('s1'))).toBe(first);
    clock.advance(200_000);
    expect(await send(hints('s1'))).toBe(first);
    // A per-session timeout: after it, the binding is gone (the next request may land elsewhere and rebinds).
    await send(hints('s2', { timeoutSecs: 1 }));
    expect(f.router.sessions.lookup('s2')).toBeDefined();
    clock.advance(1_001);
    expect(f.router.sessions.lookup('s2')).toBeUndefined();
    // close unbinds after the request that carries it.
    expect(await send(hints('s1', { action: 'close' }))).toBe(first);
    expect(f.router.sessions.lookup('s1')).toBeUndefined();
    // A worker marked down keeps its sessions for its return (not routed to meanwhile); one that leaves drops them.
    const w = await send(hints('s3'));
    f.registry.markDown(w);
    expect(f.router.sessions.lookup('s3')?.workerId).toBe(w);
    f.registry.markUp(w);
    expect(await send(hints('s3'))).toBe(w);
    // Served elsewhere while its worker is down, the session is bound there and stays after the return.
    f.registry.markDown(w);
    const elsewhere = await send(hints('s3'));
    expect(elsewhere).not.toBe(w);
    f.registry.markUp(w);
    expect(await send(hints('s3'))).toBe(elsewhere);
    f.registry.remove(elsewhere);
    expect(f.router.sessions.lookup('s3')).toBeUndefined();
  });

  // issue 12 item 4: a session never overrides the request's allowed_worker_ids (or required taints).
  it('a sticky worker the request no longer allows is unbound, and the request is routed among the allowed ones', async () => {
    fleet = await startFleet(3, { kvEvents: false, router: { mode: 'round-robin' } });
    const f = fleet;
    const first = await f.router.route(prepare(randomTokens(rng, 40), { hints: hints('a') }));
    await drain(first);
    const bound = first.worker.workerId;
    const allowed = [1, 2, 3].filter((id) => id !== bound);
    for (let i = 0; i < 3; i++) {
      const res = await f.router.route(
        prepare(randomTokens(rng, 40), { hints: { ...hints('a'), allowedWorkerIds: new Set(allowed) } }),
      );
      await drain(res);
      expect(allowed).toContain(res.worker.workerId);
    }
    // The session moved to an allowed worker and stays there.
    expect(allowed).toContain(f.router.sessions.lookup('a')!.workerId);
  });

  it('an explicit pin wins over the session', async () => {
    fleet = await startFleet(2, { kvEvents: false, router: { mode: 'round-robin' } });
    const f = fleet;
    const res = await f.router.route(prepare(randomTokens(rng, 40), { hints: hints('p') }));
    await drain(res);
    const other = res.worker.workerId === 1 ? 2 : 1;
    const pinned = await f.router.route(
      prepare(randomTokens(rng, 40), { hints: { ...hints('p'), backendInstanceId: other } }),
    );
    await drain(pinned);
    expect(pinned.worker.workerId).toBe(other);
  });
});
