/**
 * A short-lived look at one worker's KV-event streams, beside the router's
 * own subscriptions: it records the `BlockStored` events its engine publishes
 * while it is open. The tokenizer agreement probe opens one, sends its canary
 * request once every SUB socket has completed its handshake (a SUB misses
 * what is published before it is connected), and reads the blocks the canary
 * stored. The handshake does not say the engine's PUB has taken the
 * subscription (it drops what it publishes before, and nothing tells the SUB
 * when that is): the probe allows for that (it sends its canary again).
 * Nothing here touches an index or a cursor.
 */
import { Subscriber } from 'zeromq';
import './zmq-sockets.js';
import { decodeKvEventBatch, parseEventFrames } from './decode.js';
import type { StoredBlocksEvent } from './types.js';

/** One rank of a worker's publisher. */
export interface TapTarget {
  readonly endpoint: string;
  readonly topic?: string | undefined;
}

export class KvEventTap {
  /** Stored events seen so far, in arrival order (all ranks). */
  readonly stored: StoredBlocksEvent[] = [];
  readonly #subs: Subscriber[];
  readonly #loops: Promise<void>[] = [];
  readonly #waiters = new Set<() => void>();

  private constructor(subs: Subscriber[]) {
    this.#subs = subs;
    for (const s of subs) this.#loops.push(this.#receive(s));
  }

  /**
   * Connects to every target and resolves once each SUB has completed its handshake with the engine.
   * @throws Error when a handshake does not complete within `timeoutMs` or ZMQ refuses an endpoint (the sockets are closed).
   */
  static async open(targets: readonly TapTarget[], timeoutMs: number, signal?: AbortSignal): Promise<KvEventTap> {
    const subs = targets.map(() => new Subscriber({ linger: 0 }));
    const handshakes = subs.map((s) => new Promise<void>((resolve) => s.events.on('handshake', () => resolve())));
    let timer: NodeJS.Timeout | undefined;
    try {
      targets.forEach((t, i) => {
        subs[i]!.connect(t.endpoint);
        subs[i]!.subscribe(t.topic ?? '');
      });
      const late = new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`no KV-event handshake within ${timeoutMs} ms`)), timeoutMs);
        signal?.addEventListener('abort', () => reject(new Error('aborted')), { once: true });
      });
      await Promise.race([Promise.all(handshakes), late]);
    } catch (err) {
      for (const s of subs) s.close();
      throw err;
    } finally {
      clearTimeout(timer);
    }
    return new KvEventTap(subs);
  }

  /** Resolves at the next stored event, after `ms`, or when `signal` aborts (whichever comes first). */
  next(ms: number, signal?: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      const done = (): void => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', done);
        this.#waiters.delete(done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.#waiters.add(done);
      if (signal?.aborted === true) done();
      else signal?.addEventListener('abort', done, { once: true });
    });
  }

  async close(): Promise<void> {
    for (const s of this.#subs) if (!s.closed) s.close();
    await Promise.allSettled(this.#loops);
    for (const w of [...this.#waiters]) w();
  }

  async #receive(sub: Subscriber): Promise<void> {
    try {
      for await (const frames of sub) {
        const framed = parseEventFrames(frames);
        const decoded = framed.ok ? decodeKvEventBatch(framed.value.payload) : undefined;
        if (decoded?.ok !== true) continue;
        let seen = false;
        for (const e of decoded.batch.events) {
          if (e.type !== 'stored') continue;
          this.stored.push(e);
          seen = true;
        }
        if (seen) for (const w of [...this.#waiters]) w();
      }
    } catch {
      // Closed while receiving: the tap is over.
    }
  }
}
