/**
 * Issue 12 item 5: an explicit pin (a worker id header or `backend_instance_id`,
 * an endpoint picker's stage 2, a session) to an overloaded worker is booked and
 * dispatched there, never queued nor refused: the picker upstream has decided.
 * Query-only included. Unpinned requests still avoid the overloaded worker.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { seededRng } from '../../../src/common/index.js';
import { drain, prepare, randomTokens, startFleet, type Fleet } from '../../helpers/fleet.js';

describe('pins to an overloaded worker', () => {
  let f: Fleet;
  const rng = seededRng(12);
  beforeAll(async () => {
    f = await startFleet(2, {
      kvEvents: false,
      // Sessions pin (`session_affinity: pin`), as a session's binding is one of the pins under test.
      router: { routerConfig: { useKvEvents: false, activePrefillTokensThreshold: 100 }, sessionAffinity: 'pin' },
    });
    // Worker 1 holds 200 uncached prompt tokens: over the threshold of 100.
    f.router.decode.kvRouter!.addRequest({ requestId: 'hog', workerId: 1, tokens: randomTokens(rng, 200) });
  });
  afterAll(async () => {
    f.router.decode.kvRouter?.free('hog');
    await f?.close();
  });

  it('unpinned requests avoid it', async () => {
    const res = await f.router.route(prepare(randomTokens(rng, 40)));
    await drain(res);
    expect(res.worker.workerId).toBe(2);
  });

  it('a pinned query-only request is answered with it', async () => {
    const q = await f.router.query(
      prepare(randomTokens(rng, 40), { queryOnly: true, hints: { annotations: [], backendInstanceId: 1 } }),
    );
    expect(q.worker.workerId).toBe(1);
  });

  it('a pinned request is booked and served there', async () => {
    const res = await f.router.route(
      prepare(randomTokens(rng, 40), { hints: { annotations: [], backendInstanceId: 1, dpRank: 0 } }),
    );
    expect(res.status).toBe(200);
    await drain(res);
    expect(res.worker.workerId).toBe(1);
  });

  it('a session bound to it keeps going there, and keeps its binding', async () => {
    f.router.sessions.bind('s', { workerId: 1, dpRank: 0 });
    const res = await f.router.route(
      prepare(randomTokens(rng, 40), { hints: { annotations: [], session: { id: 's' } } }),
    );
    await drain(res);
    expect(res.worker.workerId).toBe(1);
    expect(f.router.sessions.lookup('s')?.workerId).toBe(1);
  });
});
