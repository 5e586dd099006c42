import { describe, expect, it } from 'vitest';
import { atTurnEnd } from '../../src/frontend/turn-end.js';

/** Resolves in the check phase of the next turn (after the tasks queued before it in this one). */
const nextCheck = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

describe('atTurnEnd (client writes gathered per event-loop turn)', () => {
  it("runs the tasks of a turn once, after the turn's synchronous work and microtasks, in the order queued", async () => {
    const seen: string[] = [];
    atTurnEnd(
      () => seen.push('a'),
      () => seen.push('fail a'),
    );
    atTurnEnd(
      () => seen.push('b'),
      () => seen.push('fail b'),
    );
    seen.push('sync');
    await Promise.resolve();
    seen.push('microtask');
    atTurnEnd(
      () => seen.push('c'),
      () => seen.push('fail c'),
    );
    expect(seen).toEqual(['sync', 'microtask']);
    await nextCheck();
    expect(seen).toEqual(['sync', 'microtask', 'a', 'b', 'c']);
    await nextCheck();
    expect(seen).toEqual(['sync', 'microtask', 'a', 'b', 'c']);
  });

  it('a task that throws goes to its own fail and the others still run', async () => {
    const seen: string[] = [];
    atTurnEnd(
      () => {
        throw new Error('write failed');
      },
      (err) => seen.push(`fail: ${(err as Error).message}`),
    );
    atTurnEnd(
      () => seen.push('after'),
      () => seen.push('fail after'),
    );
    await nextCheck();
    expect(seen).toEqual(['fail: write failed', 'after']);
  });

  it('a task queued while the queue runs waits for the next turn', async () => {
    const seen: string[] = [];
    atTurnEnd(
      () => {
        seen.push('first');
        atTurnEnd(
          () => seen.push('queued by first'),
          () => undefined,
        );
      },
      () => undefined,
    );
    await nextCheck();
    expect(seen).toEqual(['first']);
    await nextCheck();
    expect(seen).toEqual(['first', 'queued by first']);
  });
});
