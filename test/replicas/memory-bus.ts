/**
 * An in-process message bus with NATS's request semantics for replica sync
 * unit tests: exact subjects, queue groups (one member answers), `NoResponders`
 * when nobody listens, a timeout when a subscriber does not answer, a
 * filter that loses chosen requests (a chunk that never comes), a bound on
 * answers (NATS's max_payload, a larger answer thrown out of `reply`), and published
 * messages held in flight until the test releases them (a delivery delay on
 * the test's clock).
 */
import type { SyncTransport, TransportStatus } from '../../src/replicas/transport.js';
import { NoResponders } from '../../src/replicas/transport.js';

type OnMessage = (data: Uint8Array, reply: ((data: Uint8Array) => void) | undefined) => void;

export class MemoryBus {
  readonly subs: { subject: string; on: OnMessage; queue: string | undefined; owner: MemoryTransport }[] = [];
  /** Requests for which this returns true are never delivered (they time out). */
  lose: (subject: string, data: Uint8Array) => boolean = () => false;
  /** Every request sent: subject and size. */
  readonly requests: { subject: string; bytes: number }[] = [];
  /**
   * The largest answer the bus takes (bytes): a larger one throws out of `reply`, as NATS's `respond`
   * does; its transports report it as their `maxPayload` while `announced`.
   */
  maxPayload: number | undefined;
  announced = true;
  /** Published messages for which this returns true stay in flight until `release()`. */
  hold: (subject: string) => boolean = () => false;
  readonly #inFlight: (() => void)[] = [];

  /** Delivers the held messages, in the order they were published. */
  release(): void {
    for (const deliver of this.#inFlight.splice(0)) deliver();
  }

  /** Delivers `deliver` now, or on `release()` when `subject` is held. */
  send(subject: string, deliver: () => void): void {
    if (this.hold(subject)) this.#inFlight.push(deliver);
    else deliver();
  }

  transport(): MemoryTransport {
    return new MemoryTransport(this);
  }

  /** Subscribers a message on `subject` reaches: every plain one, one per queue group. */
  targets(subject: string, from: MemoryTransport): OnMessage[] {
    const groups = new Set<string>();
    const out: OnMessage[] = [];
    for (const s of this.subs) {
      if (s.subject !== subject || s.owner === from || s.owner.closed) continue;
      if (s.queue !== undefined) {
        if (groups.has(s.queue)) continue;
        groups.add(s.queue);
      }
      out.push(s.on);
    }
    return out;
  }
}

export class MemoryTransport implements SyncTransport {
  onStatus: ((status: TransportStatus, detail: string) => void) | undefined;
  closed = false;
  readonly #bus: MemoryBus;

  constructor(bus: MemoryBus) {
    this.#bus = bus;
  }

  get connected(): boolean {
    return !this.closed;
  }

  get maxPayload(): number | undefined {
    return this.#bus.announced ? this.#bus.maxPayload : undefined;
  }

  publish(subject: string, data: Uint8Array): void {
    const targets = this.#bus.targets(subject, this);
    this.#bus.send(subject, () => {
      for (const on of targets) on(data, undefined);
    });
  }

  subscribe(subject: string, on: OnMessage, queue?: string): void {
    this.#bus.subs.push({ subject, on, queue, owner: this });
  }

  request(subject: string, data: Uint8Array, timeoutMs: number): Promise<Uint8Array> {
    this.#bus.requests.push({ subject, bytes: data.byteLength });
    const targets = this.#bus.targets(subject, this);
    if (targets.length === 0) return Promise.reject(new NoResponders(`no replica answers on ${subject}`));
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`timeout on ${subject}`)), timeoutMs);
      if (this.#bus.lose(subject, data)) return;
      let answered = false;
      // Delivered on a later turn, as over a socket.
      setImmediate(() =>
        targets[0]!(data, (out) => {
          const max = this.#bus.maxPayload;
          if (max !== undefined && out.byteLength > max) throw new Error('max_payload size exceeded');
          if (answered) return;
          answered = true;
          clearTimeout(timer);
          // Copied, as a message off the wire would be.
          resolve(Uint8Array.from(out));
        }),
      );
    });
  }

  close(): Promise<boolean> {
    this.closed = true;
    return Promise.resolve(true);
  }
}
