/**
 * The ingestion threads of a process (`kv_events.ingest_threads`): worker
 * threads that hold the ZMQ SUB sockets, decode and hash (ingest-thread.ts),
 * and post packed batches back; here each batch is handed, still in the
 * transferred buffer (packed-batch.ts), to its stream on the main thread,
 * which judges and applies it as it does the batches of its own socket. Streams are spread over the threads (the least
 * loaded takes the next), several engines per thread.
 *
 * One pool per thread count is shared by every manager of the process (each
 * model pool has its own manager) and ends with the last of them. A thread
 * that dies is logged, counted in the log line, and started again with its
 * streams: what it had not yet posted is lost, which the streams see as a gap
 * and replay from the engines.
 */
import { Worker } from 'node:worker_threads';
import { workerEntryFile, type Logger } from '../common/index.js';
import type { ConnectionChange } from './connection-watch.js';
import type { KvEventStream } from './event-stream.js';
import type { IngestReport, IngestRequest } from './ingest-thread.js';
import { eachPackedBatch } from './packed-batch.js';

/** Where a stream's messages go, and who hears that its subscription ended. */
export interface IngestSink {
  readonly stream: KvEventStream;
  /**
   * The receive loop failed and the thread closed the socket. Final (counted and logged by the sink's owner):
   * nothing subscribes again, not even a restarted thread, so the slot hears no more events, goes `stale` once
   * requests reach it, and routes approximately until its subscription is replaced.
   */
  ended(error: string): void;
  /** A batch could not be handed to the stream (a bug on the apply path): logged by the sink's owner. */
  failed(err: unknown): void;
  /** The socket connected to its publisher, or lost it (connection-watch.ts, on the thread). */
  connection(change: ConnectionChange): void;
}

/** A stream to subscribe on a thread. */
export interface IngestSubscription {
  readonly endpoint: string;
  readonly topic: string;
  readonly receiveHighWaterMark: number;
  readonly maxMessageBytes: number;
  readonly eagle: boolean;
}

interface Attached {
  readonly sub: IngestSubscription;
  readonly sink: IngestSink;
  thread: PoolThread;
  /** Its subscription ended on the thread (`IngestSink.ended`): not subscribed again when the thread restarts. */
  ended?: boolean | undefined;
  added?: { resolve: () => void; reject: (err: Error) => void } | undefined;
  removed?: (() => void) | undefined;
}

interface PoolThread {
  worker: Worker;
  readonly ids: Set<number>;
  /** Subscribe / unsubscribe requests awaiting the thread's answer: the thread keeps the process alive meanwhile. */
  waiting: number;
}

const shared = new Map<number, { pool: IngestPool; refs: number }>();

export class IngestPool {
  readonly #threads: PoolThread[] = [];
  readonly #attached = new Map<number, Attached>();
  readonly #logger: Logger;
  readonly #file: string;
  #nextId = 1;
  #closed = false;

  /** The process's pool of `threads` threads, started by the first manager that asks; `release` when done. */
  static acquire(threads: number, logger: Logger): IngestPool {
    let entry = shared.get(threads);
    if (entry === undefined) shared.set(threads, (entry = { pool: new IngestPool(threads, logger), refs: 0 }));
    entry.refs++;
    return entry.pool;
  }

  private constructor(threads: number, logger: Logger) {
    this.#logger = logger;
    this.#file = workerEntryFile(import.meta.url, 'kv-ingest', 1);
    for (let i = 0; i < threads; i++) {
      const t: PoolThread = { worker: undefined as unknown as Worker, ids: new Set(), waiting: 0 };
      this.#start(t, i);
      this.#threads.push(t);
    }
    logger.info({ threads }, `KV-event ingestion on ${threads} thread(s)`);
  }

  /** One manager is done with the pool; the last one ends its threads. */
  async release(): Promise<void> {
    for (const [n, entry] of shared) {
      if (entry.pool !== this || --entry.refs > 0) continue;
      shared.delete(n);
      this.#closed = true;
      // Referenced again, so the process waits for them to end before it exits.
      await Promise.all(
        this.#threads.map((t) => {
          t.worker.ref();
          return t.worker.terminate();
        }),
      );
    }
  }

  /**
   * Subscribes a stream on the least loaded thread; resolves once the socket is connected.
   * @throws Error with ZMQ's message when it refuses the endpoint.
   */
  async attach(sub: IngestSubscription, sink: IngestSink): Promise<number> {
    const id = this.#nextId++;
    const thread = this.#threads.reduce((a, b) => (b.ids.size < a.ids.size ? b : a));
    const entry: Attached = { sub, sink, thread };
    this.#attached.set(id, entry);
    thread.ids.add(id);
    try {
      await this.#awaiting(
        thread,
        new Promise<void>((resolve, reject) => {
          entry.added = { resolve, reject };
          this.#send(thread, { op: 'add', id, ...sub });
        }),
      );
    } catch (err) {
      this.#forget(id);
      throw err;
    }
    return id;
  }

  /** Unsubscribes a stream; resolves once its thread has closed the socket and posted what it had received. */
  async detach(id: number): Promise<void> {
    const entry = this.#attached.get(id);
    if (entry === undefined || this.#closed) {
      this.#forget(id);
      return;
    }
    await this.#awaiting(
      entry.thread,
      new Promise<void>((resolve) => {
        entry.removed = resolve;
        this.#send(entry.thread, { op: 'remove', id });
      }),
    );
    this.#forget(id);
  }

  /**
   * The threads do not keep the process alive (the gateway's server does), except while the main thread
   * awaits one of them: a script that closes its manager last must not exit before the close resolves.
   */
  async #awaiting(thread: PoolThread, answer: Promise<void>): Promise<void> {
    if (thread.waiting++ === 0) thread.worker.ref();
    try {
      await answer;
    } finally {
      if (--thread.waiting === 0) thread.worker.unref();
    }
  }

  #forget(id: number): void {
    const entry = this.#attached.get(id);
    entry?.thread.ids.delete(id);
    this.#attached.delete(id);
  }

  #send(thread: PoolThread, req: IngestRequest): void {
    thread.worker.postMessage(req);
  }

  #start(thread: PoolThread, index: number): void {
    const worker = new Worker(this.#file, { name: `kvgate-kv-ingest-${index}` });
    worker.unref();
    worker.on('message', (r: IngestReport) => this.#report(r));
    worker.on('error', (err) => {
      this.#logger.error(
        { thread: index, streams: thread.ids.size, err: err.message },
        'KV-event ingestion thread failed: restarting it; its streams resubscribe and replay what was lost',
      );
    });
    worker.on('exit', () => {
      if (this.#closed || thread.worker !== worker) return;
      this.#start(thread, index);
      for (const id of thread.ids) {
        const entry = this.#attached.get(id);
        // An ended subscription stays ended (`IngestSink.ended`); the new thread answers its detach all the same.
        if (entry === undefined || entry.ended === true) continue;
        // Its socket died with the thread: a lost connection for the slot, whose new socket connects again.
        entry.sink.connection('disconnected');
        entry.thread = thread;
        this.#send(thread, { op: 'add', id, ...entry.sub });
      }
    });
    thread.worker = worker;
  }

  #report(r: IngestReport): void {
    switch (r.op) {
      case 'batches':
        eachPackedBatch(r.packed, (id, seq, batch) => {
          const sink = this.#attached.get(id)?.sink;
          if (sink === undefined) return;
          try {
            sink.stream.onDecoded(seq, batch);
          } catch (err) {
            sink.failed(err);
          }
        });
        for (const { id, frames } of r.raw) {
          const sink = this.#attached.get(id)?.sink;
          try {
            sink?.stream.onFrames(frames);
          } catch (err) {
            sink?.failed(err);
          }
        }
        return;
      case 'added': {
        const entry = this.#attached.get(r.id);
        const added = entry?.added;
        if (entry !== undefined) entry.added = undefined;
        if (r.error === undefined) added?.resolve();
        else added?.reject(new Error(r.error));
        return;
      }
      case 'removed':
        this.#attached.get(r.id)?.removed?.();
        return;
      case 'connection':
        this.#attached.get(r.id)?.sink.connection(r.change);
        return;
      case 'ended': {
        const entry = this.#attached.get(r.id);
        if (entry === undefined) return;
        entry.ended = true;
        entry.sink.ended(r.error);
        return;
      }
    }
  }
}
