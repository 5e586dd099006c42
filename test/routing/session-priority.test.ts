/** Session-start priority: a session's start is its first sighting, shared down an agent tree, slid by use, bounded. */
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/common/index.js';
import { SessionPriority } from '../../src/routing/session-priority.js';

const EPOCH = 1_800_000_000_000;

function setup(order: 'lower_first' | 'higher_first' = 'lower_first', maxSessions?: number) {
  const clock = new ManualClock(1000);
  const limits: string[] = [];
  const onLimit = (limit: string): number => limits.push(limit);
  const sp = new SessionPriority(clock, { order, epochOffsetMs: EPOCH, maxTtlMs: 600_000, maxSessions, onLimit });
  return { clock, sp, limits };
}

describe('SessionPriority', () => {
  it("gives a session its first sighting's time in Unix ms, every later turn the same; no session is its own start", () => {
    const { clock, sp } = setup();
    expect(sp.priorityOf({ id: 'a' })).toBe(EPOCH + 1000);
    clock.advance(250);
    expect(sp.priorityOf(undefined)).toBe(EPOCH + 1250);
    expect(sp.priorityOf({ id: 'b' })).toBe(EPOCH + 1250);
    clock.advance(60_000);
    expect(sp.priorityOf({ id: 'a' })).toBe(EPOCH + 1000); // older than b: served first by a lower-first engine
    expect(sp.priorityOf({ id: 'b' })).toBe(EPOCH + 1250);
  });

  it('negates the start for engines that serve higher values first', () => {
    const { clock, sp } = setup('higher_first');
    const a = sp.priorityOf({ id: 'a' });
    clock.advance(10);
    const b = sp.priorityOf({ id: 'b' });
    expect(a).toBe(-(EPOCH + 1000));
    expect(a).toBeGreaterThan(b);
  });

  it("gives a subagent its parent's start, and the parent one when it was never seen", () => {
    const { clock, sp } = setup();
    sp.priorityOf({ id: 'parent' });
    clock.advance(5000);
    expect(sp.priorityOf({ id: 'child', parentId: 'parent' })).toBe(EPOCH + 1000);
    expect(sp.priorityOf({ id: 'grandchild', parentId: 'child' })).toBe(EPOCH + 1000);
    expect(sp.priorityOf({ id: 'orphan', parentId: 'unseen' })).toBe(EPOCH + 6000);
    clock.advance(1);
    expect(sp.priorityOf({ id: 'unseen' })).toBe(EPOCH + 6000);
  });

  it("forgets a session unseen past its timeout (a child's turns keep the parent), and on close", () => {
    const { clock, sp, limits } = setup();
    sp.priorityOf({ id: 'a' });
    sp.priorityOf({ id: 'p' });
    for (let i = 0; i < 3; i++) {
      clock.advance(200_000);
      sp.priorityOf({ id: 'c', parentId: 'p' }); // the parent waits on its subagent past 300 s
    }
    expect(sp.priorityOf({ id: 'p' })).toBe(EPOCH + 1000);
    expect(sp.priorityOf({ id: 'a' })).toBe(EPOCH + clock.now()); // unseen for 600 s: starts again
    // A timeout the session names counts, clamped to the 600 s maximum (and told).
    expect(limits).toEqual([]);
    sp.priorityOf({ id: 'long', timeoutSecs: 86_400 });
    expect(limits).toEqual(['timeout']);
    clock.advance(599_999);
    expect(sp.priorityOf({ id: 'long' })).toBe(EPOCH + clock.now() - 599_999);
    clock.advance(600_000);
    expect(sp.priorityOf({ id: 'long' })).toBe(EPOCH + clock.now());
    const t = clock.now();
    clock.advance(5);
    expect(sp.priorityOf({ id: 'long', action: 'close' })).toBe(EPOCH + t);
    expect(sp.priorityOf({ id: 'long' })).toBe(EPOCH + t + 5);
  });

  it('holds at most maxSessions starts, dropping the least recently seen, and tells of each drop', () => {
    const { clock, sp, limits } = setup('lower_first', 2);
    sp.priorityOf({ id: 'a' });
    clock.advance(1);
    sp.priorityOf({ id: 'b' });
    clock.advance(1);
    sp.priorityOf({ id: 'a' }); // a is now the most recently seen
    sp.priorityOf({ id: 'c' }); // drops b
    expect(sp.size).toBe(2);
    expect(sp.priorityOf({ id: 'a' })).toBe(EPOCH + 1000);
    expect(sp.priorityOf({ id: 'b' })).toBe(EPOCH + 1002); // new again (and drops c)
    expect(limits).toEqual(['capacity', 'capacity']);
  });
});
