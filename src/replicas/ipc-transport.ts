/**
 * Replica sync between the processes of one `kvgate serve --processes N`
 * without NATS: the cluster's own IPC channel is the bus. Each worker process
 * runs an `IpcTransport` (the same `SyncTransport` ReplicaSync runs on over
 * NATS); the primary runs `relaySyncMessages`, which hands every publish and
 * request of one worker to the others and every reply back to its requester.
 * Subjects are matched exactly, in the worker (the primary knows none).
 *
 * Contract: the cluster runs with `serialization: 'advanced'`, so payloads
 * cross as Uint8Array.
 */
import type { Worker } from 'node:cluster';
import type { SyncTransport, TransportStatus } from './transport.js';

/** The messages on the IPC channel; `kvgateSync` tells them from anything else sent there. */
type SyncMessage =
  | { kvgateSync: 'publish'; subject: string; data: Uint8Array }
  | { kvgateSync: 'request'; subject: string; data: Uint8Array; id: number; from?: number }
  | { kvgateSync: 'reply'; data: Uint8Array; id: number; to?: number };

type OnMessage = (data: Uint8Array, reply: ((data: Uint8Array) => void) | undefined) => void;

function isSyncMessage(m: unknown): m is SyncMessage {
  return typeof m === 'object' && m !== null && typeof (m as { kvgateSync?: unknown }).kvgateSync === 'string';
}

/** The worker side: the process's IPC channel to the cluster primary. */
export class IpcTransport implements SyncTransport {
  onStatus: ((status: TransportStatus, detail: string) => void) | undefined;
  readonly #subs = new Map<string, OnMessage[]>();
  readonly #pending = new Map<number, { resolve: (data: Uint8Array) => void; timer: NodeJS.Timeout }>();
  #nextId = 1;
  readonly #proc: NodeJS.Process;
  readonly #onMessage = (m: unknown): void => this.#receive(m);

  /** @throws Error when this process has no IPC channel (it was not forked by the cluster primary). */
  constructor(proc: NodeJS.Process = process) {
    if (proc.send === undefined)
      throw new Error('replica sync over IPC needs a process forked by kvgate serve --processes');
    this.#proc = proc;
    proc.on('message', this.#onMessage);
    proc.once('disconnect', () => this.onStatus?.('disconnected', "the cluster primary's IPC channel closed"));
  }

  get connected(): boolean {
    return this.#proc.connected;
  }

  /** The IPC channel has no message bound. */
  readonly maxPayload = undefined;

  #send(m: SyncMessage): void {
    if (!this.#proc.connected) throw new Error("the cluster primary's IPC channel is closed");
    this.#proc.send!(m);
  }

  #receive(m: unknown): void {
    if (!isSyncMessage(m)) return;
    if (m.kvgateSync === 'reply') {
      const p = this.#pending.get(m.id);
      if (p === undefined) return;
      this.#pending.delete(m.id);
      clearTimeout(p.timer);
      p.resolve(m.data);
      return;
    }
    const subs = this.#subs.get(m.subject);
    if (subs === undefined) return;
    const reply =
      m.kvgateSync === 'request'
        ? (data: Uint8Array): void => {
            if (this.#proc.connected) this.#send({ kvgateSync: 'reply', data, id: m.id, to: m.from });
          }
        : undefined;
    for (const s of subs) s(m.data, reply);
  }

  publish(subject: string, data: Uint8Array): void {
    this.#send({ kvgateSync: 'publish', subject, data });
  }

  subscribe(subject: string, onMessage: OnMessage): void {
    const subs = this.#subs.get(subject);
    if (subs === undefined) this.#subs.set(subject, [onMessage]);
    else subs.push(onMessage);
  }

  request(subject: string, data: Uint8Array, timeoutMs: number): Promise<Uint8Array> {
    const id = this.#nextId++;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#pending.delete(id);
        reject(new Error(`no answer on ${subject} within ${timeoutMs} ms`));
      }, timeoutMs);
      timer.unref();
      this.#pending.set(id, { resolve, timer });
      try {
        this.#send({ kvgateSync: 'request', subject, data, id });
      } catch (err) {
        clearTimeout(timer);
        this.#pending.delete(id);
        reject(err as Error);
      }
    });
  }

  close(): Promise<boolean> {
    this.#proc.off('message', this.#onMessage);
    for (const p of this.#pending.values()) clearTimeout(p.timer);
    this.#pending.clear();
    return Promise.resolve(true);
  }
}

/**
 * The primary side: relays one worker's sync messages. Publishes and requests go to
 * every other live worker (a request's answer comes from whichever holds the subject);
 * replies go to the requester. `workers` is the cluster's current set.
 */
export function relaySyncMessages(from: Worker, message: unknown, workers: () => Iterable<Worker>): void {
  if (!isSyncMessage(message)) return;
  const send = (w: Worker, m: SyncMessage): void => {
    if (w.isConnected()) w.send(m);
  };
  if (message.kvgateSync === 'reply') {
    for (const w of workers())
      if (w.id === message.to) send(w, { kvgateSync: 'reply', data: message.data, id: message.id });
    return;
  }
  const out: SyncMessage = message.kvgateSync === 'request' ? { ...message, from: from.id } : message;
  for (const w of workers()) if (w.id !== from.id) send(w, out);
}
