/** The scheduler's queue with tenant classes: DRR order of admission, and a full queue shed by class share. */
import { describe, expect, it } from 'vitest';
import { ManualClock, seededRng, type TenantHint } from '../../../src/common/index.js';
import {
  KvScheduler,
  rejectionError,
  type AdmissionResult,
  type ScheduleOutcome,
  type SchedulingRequest,
} from '../../../src/core/index.js';
import { promptHashes } from '../../../src/wasm/index.js';

const BS = 4;

const tenant = (name: string, cls: string, weight: number, queueLimitPerWorker?: number): TenantHint => ({
  tenant: name,
  class: cls,
  priority: 0,
  weight,
  queueLimitPerWorker,
});

/** One worker, prefill-busy while one 200-token prompt prefills (budget 100). */
function scheduler(): KvScheduler {
  const s = new KvScheduler({
    blockSize: BS,
    config: { routerQueueThreshold: 1.0 },
    clock: new ManualClock(),
    rng: seededRng(1),
  });
  s.addWorker(1, { maxNumBatchedTokens: 100 });
  return s;
}

let n = 0;
function req(id: string, t: TenantHint): SchedulingRequest {
  const tokens = Array.from({ length: 200 }, (_, i) => ++n * 1000 + i);
  return { requestId: id, isl: 200, hashes: promptHashes(tokens, BS), tenant: t };
}

function ticket(o: ScheduleOutcome): Promise<AdmissionResult> {
  if (o.status !== 'queued') throw new Error(`expected queued, got ${o.status}`);
  return o.ticket.admitted;
}

describe('KvScheduler with tenant classes', () => {
  it('admits the parked requests by deficit round robin over the classes (weights 2:1)', async () => {
    const s = scheduler();
    const gold = tenant('acme', 'gold', 2);
    const free = tenant('beta', 'free', 1);
    expect(s.schedule(req('busy', free)).status).toBe('routed');
    const order: string[] = [];
    const waits: Promise<AdmissionResult>[] = [];
    for (let i = 0; i < 4; i++) {
      for (const [id, t] of [
        [`f${i}`, free],
        [`g${i}`, gold],
      ] as const) {
        waits.push(
          ticket(s.schedule(req(id, t))).then((r) => {
            order.push(id);
            return r;
          }),
        );
      }
    }
    // Each prefill completion frees the worker for the next one.
    let prev = 'busy';
    for (let i = 0; i < 8; i++) {
      s.markPrefillCompleted(prev);
      await Promise.resolve();
      await Promise.resolve();
      prev = order[i]!;
    }
    await Promise.all(waits);
    expect(order).toEqual(['f0', 'g0', 'g1', 'f1', 'g2', 'g3', 'f2', 'f3']);
  });

  it('sheds the class over its share when the queue is full: its queued request, or the newcomer (529)', async () => {
    const s = scheduler();
    const team = (name: string) => tenant(name, 'team', 2, 2);
    const free = tenant('noisy', 'free', 1, 2);
    expect(s.schedule(req('busy', team('a'))).status).toBe('routed');
    const n1 = ticket(s.schedule(req('n1', free)));
    const n2 = ticket(s.schedule(req('n2', free)));
    // Full (2 per worker): a team request takes the place of free's last one.
    const t1 = ticket(s.schedule(req('t1', team('a'))));
    const shed = await n2;
    expect(shed.status).toBe('failed');
    const err = (shed as { error: { code: string; statusCode: number; detail: unknown } }).error;
    expect(err.code).toBe('KVG_ERR_QUEUE_SHED');
    expect(err.statusCode).toBe(529);
    expect(err.detail).toMatchObject({ class: 'free', capacity: 2 });
    // free (1 queued / weight 1 + the newcomer) is the fuller class: the newcomer is refused.
    const refused = s.schedule(req('n3', free));
    expect(refused.status).toBe('rejected');
    if (refused.status === 'rejected') expect(rejectionError(refused.rejection).code).toBe('KVG_ERR_QUEUE_SHED');
    expect(s.pendingRequests).toBe(2);
    s.markPrefillCompleted('busy');
    expect((await Promise.race([n1, t1])).status).toBe('routed');
  });
});
