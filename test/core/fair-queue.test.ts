import { describe, expect, it } from 'vitest';
import { FairQueue, type QueueClass } from '../../src/core/fair-queue.js';
import { seededRng } from '../../src/common/index.js';

const cls = (tenant: string, klass: string, weight = 1, priority = 0): QueueClass => ({
  tenant,
  class: klass,
  priority,
  weight,
});

/** Pushes `n` requests of `c`, keys in arrival order (FCFS: a later arrival has a lower key). */
function fill(q: FairQueue<string>, c: QueueClass, n: number, seq: { t: number }): void {
  for (let i = 0; i < n; i++) q.push(`${c.tenant}#${i}`, c, 0, -seq.t++, 10);
}

/** Admits `n` requests, one per drain, and returns whose they were. */
function admitN(q: FairQueue<string>, n: number): string[] {
  const out: string[] = [];
  let left = n;
  q.drain(
    () => left > 0,
    (e) => {
      out.push(e.payload.tenant);
      left--;
    },
  );
  return out;
}

const count = (xs: string[], x: string): number => xs.filter((y) => y === x).length;

describe('FairQueue: deficit round robin across tenant classes', () => {
  it('honours weights within one request per round over a long run', () => {
    const q = new FairQueue<string>();
    const seq = { t: 0 };
    const gold = cls('acme', 'gold', 3);
    const std = cls('beta', 'standard', 1);
    fill(q, gold, 3000, seq);
    fill(q, std, 3000, seq);
    const order = admitN(q, 2000);
    // Every prefix of the run is within one round (weights 3 + 1) of the 3:1 split.
    let a = 0;
    for (let i = 0; i < order.length; i++) {
      if (order[i] === 'acme') a++;
      expect(Math.abs(a - ((i + 1) * 3) / 4)).toBeLessThanOrEqual(3);
    }
    expect(count(order, 'acme')).toBe(1500);
    expect(count(order, 'beta')).toBe(500);
  });

  it('starves no backlogged class: each is served once per round, whatever the others hold', () => {
    const q = new FairQueue<string>();
    const seq = { t: 0 };
    fill(q, cls('heavy', 'bulk', 1000), 5000, seq);
    fill(q, cls('light', 'small', 1), 3, seq);
    const order = admitN(q, 3 * 1001);
    const positions = order.flatMap((t, i) => (t === 'light' ? [i] : []));
    expect(positions).toHaveLength(3);
    // The light class waits at most one round (the heavy class's 1000) between its requests.
    expect(positions[0]).toBeLessThanOrEqual(1000);
    for (let i = 1; i < positions.length; i++) expect(positions[i]! - positions[i - 1]!).toBeLessThanOrEqual(1001);
  });

  it('serves a higher priority tier first, and DRR again once it is empty', () => {
    const q = new FairQueue<string>();
    const seq = { t: 0 };
    fill(q, cls('low', 'batch', 1, 0), 4, seq);
    fill(q, cls('high', 'interactive', 1, 5), 2, seq);
    expect(admitN(q, 6)).toEqual(['high', 'high', 'low', 'low', 'low', 'low']);
  });

  it('takes turns between the tenants of one class, and keeps each tenant in arrival order', () => {
    const q = new FairQueue<string>();
    const seq = { t: 0 };
    fill(q, cls('a', 'shared'), 4, seq);
    fill(q, cls('b', 'shared'), 2, seq);
    const got: string[] = [];
    q.drain(
      () => true,
      (e) => got.push(e.payload.payload),
    );
    expect(got).toEqual(['a#0', 'b#0', 'a#1', 'b#1', 'a#2', 'a#3']);
  });

  it('forfeits an idle class its credit, and skips cancelled entries', () => {
    const q = new FairQueue<string>();
    const seq = { t: 0 };
    const e = q.push('x', cls('x', 'one', 5), 0, -seq.t++, 10);
    expect(q.cancel(e)).toBe(true);
    expect(q.cancel(e)).toBe(false);
    expect(q.pendingRequests).toBe(0);
    fill(q, cls('x', 'one', 5), 2, seq);
    fill(q, cls('y', 'two', 5), 2, seq);
    expect(admitN(q, 4)).toEqual(['x', 'x', 'y', 'y']);
    expect(q.pendingRequests).toBe(0);
    expect(q.pendingIslTokens).toBe(0);
  });

  it('keeps the split under random arrivals and admissions (seeded)', () => {
    const rng = seededRng(42);
    const q = new FairQueue<string>();
    const seq = { t: 0 };
    const a = cls('a', 'gold', 2);
    const b = cls('b', 'standard', 1);
    const served: string[] = [];
    for (let step = 0; step < 20_000; step++) {
      // Both stay backlogged: arrivals outpace admissions.
      if (rng() < 0.9) fill(q, a, 1, seq);
      if (rng() < 0.9) fill(q, b, 1, seq);
      if (q.pendingByTenant().get('a')! > 0 && q.pendingByTenant().get('b')! > 0) served.push(...admitN(q, 1));
    }
    const share = count(served, 'a') / served.length;
    expect(share).toBeGreaterThan(2 / 3 - 0.01);
    expect(share).toBeLessThan(2 / 3 + 0.01);
  });
});

describe('FairQueue: shedding a full queue', () => {
  it('has no victim while there is room', () => {
    const q = new FairQueue<string>();
    fill(q, cls('a', 'one'), 3, { t: 0 });
    expect(q.victim(cls('a', 'one'), 4)).toBeUndefined();
  });

  it("sheds the class most over its share, its tenant's last request, not the newcomer of a class within its share", () => {
    const q = new FairQueue<string>();
    const seq = { t: 0 };
    fill(q, cls('noisy', 'standard', 1), 9, seq);
    fill(q, cls('quiet', 'gold', 4), 1, seq);
    const v = q.victim(cls('quiet', 'gold', 4), 10);
    expect(v).not.toBe('incoming');
    expect(v).not.toBeUndefined();
    const e = v as Exclude<typeof v, 'incoming' | undefined>;
    expect(e.payload.tenant).toBe('noisy');
    expect(e.payload.payload).toBe('noisy#8');
  });

  it('refuses the newcomer when its own class is the most over its share', () => {
    const q = new FairQueue<string>();
    const seq = { t: 0 };
    fill(q, cls('noisy', 'standard', 1), 9, seq);
    fill(q, cls('quiet', 'gold', 4), 1, seq);
    expect(q.victim(cls('noisy', 'standard', 1), 10)).toBe('incoming');
  });

  it('sheds the lowest priority first, whatever the shares', () => {
    const q = new FairQueue<string>();
    const seq = { t: 0 };
    fill(q, cls('vip', 'interactive', 1, 9), 8, seq);
    fill(q, cls('bg', 'batch', 100, 0), 2, seq);
    const v = q.victim(cls('vip', 'interactive', 1, 9), 10);
    expect(v !== 'incoming' && v?.payload.tenant).toBe('bg');
    expect(q.victim(cls('bg2', 'batch', 100, 0), 10)).not.toBe('incoming');
    expect(q.victim(cls('low', 'lowest', 100, -1 + 1), 10)).not.toBe('incoming');
  });

  it('in the shed class, takes from the tenant holding the most', () => {
    const q = new FairQueue<string>();
    const seq = { t: 0 };
    fill(q, cls('a', 'standard'), 2, seq);
    fill(q, cls('b', 'standard'), 6, seq);
    fill(q, cls('c', 'gold', 8), 2, seq);
    const v = q.victim(cls('a', 'standard'), 10);
    expect(v !== 'incoming' && v?.payload.payload).toBe('b#5');
  });
});
