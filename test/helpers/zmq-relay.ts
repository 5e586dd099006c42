/**
 * An attacker on a KV-event path, for flood tests: a relay that subscribes to
 * an engine's PUB socket and republishes every message on its own PUB
 * (127.0.0.1, OS-chosen port), and can push random frames into the same
 * stream. The gateway subscribes to the relay (and replays from the engine
 * itself), so it sees the engine's real batches interleaved with the flood,
 * as it would from a hostile or broken hop in front of the engine.
 *
 * The relay's PUB is an XPUB so a test can await the gateway's subscription
 * instead of sleeping. `randomFrames` draws every message from a seeded RNG.
 */
import { encode } from '@msgpack/msgpack';
import { Subscriber, XPublisher } from 'zeromq';
import { until } from './until.js';

/**
 * One random message of the kinds an attacker sends: a wrong number of frames,
 * a sequence frame of the wrong length, or three frames with a random u64
 * sequence number and a payload of random bytes, of msgpack containers that
 * claim huge lengths, or of a well-formed batch that would wipe the worker.
 */
function randomFrames(rng: () => number): Buffer[] {
  const bytes = (n: number): Buffer => Buffer.from(Array.from({ length: n }, () => Math.floor(rng() * 256)));
  const topic = bytes(Math.floor(rng() * 4));
  const seq = bytes(8);
  switch (Math.floor(rng() * 6)) {
    case 0:
      return Array.from({ length: [1, 2, 4, 5][Math.floor(rng() * 4)]! }, () => bytes(Math.floor(rng() * 24)));
    case 1:
      return [topic, bytes([0, 1, 4, 7, 9, 16][Math.floor(rng() * 6)]!), bytes(16)];
    case 2:
      return [topic, seq, bytes(1 + Math.floor(rng() * 64))];
    case 3: {
      // array32, map32, bin32 and str32 headers claiming 4 GiB-1 elements or bytes, nested, then nothing.
      const heads = [0xdd, 0xdf, 0xc6, 0xdb];
      const claim = (): Buffer => Buffer.from([heads[Math.floor(rng() * 4)]!, 0xff, 0xff, 0xff, 0xff]);
      return [topic, seq, Buffer.concat(Array.from({ length: 1 + Math.floor(rng() * 8) }, claim))];
    }
    case 4:
      return [topic, seq, Buffer.from(encode([1.5, [['AllBlocksCleared']], 0]))];
    default: {
      // A batch-shaped array whose events are not events.
      const events = Array.from({ length: Math.floor(rng() * 4) }, () => rng());
      return [topic, seq, Buffer.from(encode([rng() * 1e9, events, Math.floor(rng() * 4)]))];
    }
  }
}

export class KvEventRelay {
  readonly #sub: Subscriber;
  readonly #pub: XPublisher;
  readonly #loops: Promise<void>[] = [];
  #sendChain: Promise<void> = Promise.resolve();
  #subscriptions = 0;
  /** Engine messages republished so far. */
  forwarded = 0;
  endpoint = '';

  private constructor() {
    this.#sub = new Subscriber({ linger: 0, receiveHighWaterMark: 0 });
    this.#pub = new XPublisher({ linger: 0, sendHighWaterMark: 100_000 });
    this.#pub.verbosity = 'allSubs';
  }

  /** Binds the relay's PUB and subscribes to `upstream` (an engine's KV-event endpoint). */
  static async start(upstream: string): Promise<KvEventRelay> {
    const r = new KvEventRelay();
    await r.#pub.bind('tcp://127.0.0.1:*');
    r.endpoint = r.#pub.lastEndpoint!;
    r.#sub.connect(upstream);
    r.#sub.subscribe();
    r.#loops.push(r.#forward(), r.#watchSubscriptions());
    return r;
  }

  /** Resolves once the gateway (any subscriber) has subscribed to the relay. */
  waitForSubscriber(timeoutMs = 10_000): Promise<void> {
    return until(() => this.#subscriptions > 0, `a subscriber on the relay ${this.endpoint}`, timeoutMs);
  }

  /** Sends `count` random messages into the stream, yielding every 500 so the engine's batches interleave. */
  async flood(count: number, rng: () => number): Promise<void> {
    for (let i = 0; i < count; i++) {
      this.#send(randomFrames(rng));
      if (i % 500 === 499) {
        await this.#sendChain;
        await new Promise((r) => setImmediate(r));
      }
    }
    await this.#sendChain;
  }

  async #forward(): Promise<void> {
    try {
      for await (const frames of this.#sub) {
        this.forwarded++;
        this.#send(frames);
      }
    } catch {
      // closed
    }
  }

  async #watchSubscriptions(): Promise<void> {
    try {
      for await (const [msg] of this.#pub) if (msg !== undefined && msg[0] === 1) this.#subscriptions++;
    } catch {
      // closed
    }
  }

  // zeromq allows one pending send per socket: chain them (forwarded and injected messages share the PUB).
  #send(frames: Buffer[]): void {
    this.#sendChain = this.#sendChain
      .then(() => (this.#pub.closed ? undefined : this.#pub.send(frames)))
      .catch(() => undefined);
  }

  async close(): Promise<void> {
    await this.#sendChain;
    this.#sub.close();
    this.#pub.close();
    await Promise.all(this.#loops);
  }
}
