import { describe, expect, it } from 'vitest';
import { Cancellation, type CancelSignal } from '../../src/common/index.js';

describe('Cancellation', () => {
  it('fires its listeners once, in order, with the reason readable', () => {
    const c = new Cancellation();
    const seen: string[] = [];
    c.signal.addEventListener('abort', () => seen.push(`a:${String(c.signal.reason)}`));
    c.signal.addEventListener('abort', () => seen.push('b'), { once: true });
    c.signal.addEventListener('abort', () => seen.push('c'));
    expect(c.signal.aborted).toBe(false);
    expect(() => c.signal.throwIfAborted()).not.toThrow();
    c.abort('gone');
    c.abort('again');
    expect(seen).toEqual(['a:gone', 'b', 'c']);
    expect(c.signal.aborted).toBe(true);
    expect(c.signal.reason).toBe('gone');
    expect(() => c.signal.throwIfAborted()).toThrow('gone');
  });

  it('does not call a removed listener, nor one added after the abort', () => {
    const c = new Cancellation();
    const seen: string[] = [];
    const first = (): void => void seen.push('first');
    const second = (): void => void seen.push('second');
    c.addEventListener('abort', first);
    c.addEventListener('abort', second);
    c.removeEventListener('abort', first);
    c.removeEventListener('abort', () => undefined);
    c.abort(new Error('x'));
    c.addEventListener('abort', () => seen.push('late'));
    expect(seen).toEqual(['second']);
  });

  it('runs the other listeners when one throws, and reports that error uncaught', async () => {
    const c = new Cancellation();
    const seen: string[] = [];
    c.addEventListener('abort', () => {
      throw new Error('listener broke');
    });
    c.addEventListener('abort', () => seen.push('after'));
    const uncaught = new Promise<unknown>((resolve) => {
      const listeners = process.listeners('uncaughtException');
      process.removeAllListeners('uncaughtException');
      process.once('uncaughtException', (err) => {
        for (const l of listeners) process.on('uncaughtException', l);
        resolve(err);
      });
    });
    c.abort('r');
    expect(seen).toEqual(['after']);
    expect(((await uncaught) as Error).message).toBe('listener broke');
  });

  it('has the shape of AbortSignal: a real AbortSignal is a CancelSignal', () => {
    const ac = new AbortController();
    const s: CancelSignal = ac.signal;
    let fired = 0;
    s.addEventListener('abort', () => fired++, { once: true });
    ac.abort('why');
    expect(fired).toBe(1);
    expect(s.reason).toBe('why');
  });
});
