/**
 * The ingestion threads of a process (`kv_events.ingest_threads`): worker
 * threads that hold the ZMQ SUB sockets, decode and hash (ingest-thread.ts),
 * and post packed batches back; here each batch is handed, still in the
 * transferred buffer (packed-batch.ts), to its stream on the main thread,
 * which judges and applies it as it does the batches of its own socket. Streams are spread over the threads (the least
 * loaded takes the next), several engines per thread.
 *
 * One pool per thread count is shared by every manager of the process (each
 * model pool has its own manager) and ends with the last of them.
 *
 * A thread that fails (an uncaught exception, an unhandled rejection) closes its sockets before it ends
 * (ingest-thread-runtime.ts: zeromq aborts the whole process over a thread that ends with a socket open).
 * Its failure is an error line with the thread's own error, and once it has ended it is started again
 * with its streams (after a back-off when it keeps failing at once: ingest-worker.ts), counted by reason
 * (`onRestart`; `kvgate_kv_event_ingest_thread_restarts_total` in serve): each stream subscribes again,
 * and what the thread had not posted shows as a gap, replayed from the engine. A stream whose
 * subscription had ended, or that was being removed, is not subscribed again (its removal resolves); one
 * the new thread refuses is counted and logged as refused (`IngestSink.refused`). The pool's release asks
 * each thread to close its sockets and end (ingest-worker.ts, `IngestWorker`: one thread's worker,
 * terminated only if it has not ended in time, with an error line when its sockets may be open).
 */
import { workerEntryFile, type Logger } from '../common/index.js';
import type { ConnectionChange } from './connection-watch.js';
import type { KvEventStream } from './event-stream.js';
import type { IngestReport } from './ingest-thread.js';
import { IngestWorker, type IngestThreadEnd, type IngestThreadRestartReason } from './ingest-worker.js';
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
  /**
   * The thread that replaced a failed one refused to subscribe the stream again (ZMQ's `error`: no room for a
   * socket). Final, as `ended` is (counted as a refused subscription and logged by the sink's owner).
   */
  refused(error: string): void;
  /** A batch could not be handed to the stream (a bug on the apply path): logged by the sink's owner. */
  failed(err: unknown): void;
  /**
   * The socket connected to its publisher, or lost it (connection-watch.ts, on the thread); `cause` says why a
   * connection was lost where the pool knows (its thread restarted), for the log.
   */
  connection(change: ConnectionChange, cause?: string): void;
}

/** A stream to subscribe on a thread. */
export interface IngestSubscription {
  readonly endpoint: string;
  readonly topic: string;
  readonly receiveHighWaterMark: number;
  readonly maxMessageBytes: number;
  readonly eagle: boolean;
  readonly maxBatchElements: number;
}

interface Attached {
  readonly sub: IngestSubscription;
  readonly sink: IngestSink;
  thread: IngestWorker;
  /** Its subscription ended on the thread (`IngestSink.ended`, `refused`): not subscribed again when the thread restarts. */
  ended?: boolean | undefined;
  added?: { resolve: () => void; reject: (err: Error) => void } | undefined;
  removed?: (() => void) | undefined;
}

const shared = new Map<number, { pool: IngestPool; refs: number }>();

export class IngestPool {
  readonly #threads: IngestWorker[] = [];
  readonly #attached = new Map<number, Attached>();
  readonly #logger: Logger;
  /** Told of every restart, each once however many managers share it (its count of managers that gave it). */
  readonly #onRestart = new Map<(reason: IngestThreadRestartReason) => void, number>();
  #nextId = 1;
  #closed = false;

  /**
   * The process's pool of `threads` threads, started by the first manager that asks; `release` when done
   * (with the same `onRestart`). `onRestart` is told of each thread restarted: managers that count into the
   * same registry give the same function, which is then told once.
   */
  static acquire(threads: number, logger: Logger, onRestart?: (reason: IngestThreadRestartReason) => void): IngestPool {
    let entry = shared.get(threads);
    if (entry === undefined) shared.set(threads, (entry = { pool: new IngestPool(threads, logger), refs: 0 }));
    entry.refs++;
    if (onRestart !== undefined) entry.pool.#onRestart.set(onRestart, (entry.pool.#onRestart.get(onRestart) ?? 0) + 1);
    return entry.pool;
  }

  private constructor(threads: number, logger: Logger) {
    this.#logger = logger;
    const file = workerEntryFile(import.meta.url, 'kv-ingest', 1);
    for (let index = 0; index < threads; index++) {
      const thread: IngestWorker = new IngestWorker(
        index,
        file,
        logger,
        (r) => this.#report(r),
        (end) => this.#exited(thread, end),
      );
      thread.start();
      this.#threads.push(thread);
    }
    logger.info({ threads }, `KV-event ingestion on ${threads} thread(s)`);
  }

  /**
   * One manager is done with the pool; the last one ends its threads: each is asked to close its sockets
   * and end (ingest-worker.ts: terminated only if it has not ended in time, and loudly).
   */
  async release(onRestart?: (reason: IngestThreadRestartReason) => void): Promise<void> {
    if (onRestart !== undefined) {
      const n = (this.#onRestart.get(onRestart) ?? 0) - 1;
      if (n > 0) this.#onRestart.set(onRestart, n);
      else this.#onRestart.delete(onRestart);
    }
    for (const [n, entry] of shared) {
      if (entry.pool !== this || --entry.refs > 0) continue;
      shared.delete(n);
      this.#closed = true;
      await Promise.all(this.#threads.map((t) => t.stop()));
      // Threads that ended before (awaiting their restart) settle here.
      for (const t of this.#threads) this.#settle(t);
    }
  }

  /**
   * Subscribes a stream on the least loaded thread; resolves once the socket is connected.
   * @throws Error with ZMQ's message when it refuses the endpoint, or when the pool closed meanwhile.
   */
  async attach(sub: IngestSubscription, sink: IngestSink): Promise<number> {
    const id = this.#nextId++;
    const thread = this.#threads.reduce((a, b) => (b.ids.size < a.ids.size ? b : a));
    const entry: Attached = { sub, sink, thread };
    this.#attached.set(id, entry);
    thread.ids.add(id);
    try {
      await thread.awaiting(
        new Promise<void>((resolve, reject) => {
          entry.added = { resolve, reject };
          thread.send({ op: 'add', id, ...sub });
        }),
      );
    } catch (err) {
      this.#forget(id);
      throw err;
    }
    return id;
  }

  /**
   * Unsubscribes a stream; resolves once its thread has closed the socket and posted what it had received,
   * or has ended (failed, or the pool's release) with the socket: nothing more reaches the stream either way.
   */
  async detach(id: number): Promise<void> {
    const entry = this.#attached.get(id);
    if (entry === undefined || this.#closed) {
      this.#forget(id);
      return;
    }
    await entry.thread.awaiting(
      new Promise<void>((resolve) => {
        entry.removed = resolve;
        entry.thread.send({ op: 'remove', id });
      }),
    );
    this.#forget(id);
  }

  #forget(id: number): void {
    const entry = this.#attached.get(id);
    entry?.thread.ids.delete(id);
    this.#attached.delete(id);
  }

  /**
   * A thread's worker ended. Unless the pool is closed, a new worker takes its place (at once, or after a
   * back-off when it keeps failing: `IngestWorker.restartDelay`).
   */
  #exited(thread: IngestWorker, end: IngestThreadEnd | undefined): void {
    if (this.#closed) {
      this.#settle(thread);
      return;
    }
    const reason = end?.reason ?? 'exited';
    const delayMs = thread.restartDelay();
    if (delayMs === 0) this.#restart(thread, reason, 0);
    else setTimeout(() => this.#restart(thread, reason, delayMs), delayMs).unref();
  }

  /**
   * Starts a new worker for `thread`, counted by reason, and subscribes its streams again there, but for those
   * whose subscription ended (final) and those being removed (their removal resolves: the socket died with the
   * thread). A stream attached meanwhile is sent too (its first subscription, still unanswered).
   */
  #restart(thread: IngestWorker, reason: IngestThreadRestartReason, delayMs: number): void {
    if (this.#closed) {
      this.#settle(thread);
      return;
    }
    thread.start();
    for (const notify of this.#onRestart.keys()) notify(reason);
    let resubscribed = 0;
    for (const id of thread.ids) {
      const entry = this.#attached.get(id);
      if (entry === undefined || entry.ended === true) continue;
      if (entry.removed !== undefined) {
        entry.removed();
        continue;
      }
      // Its socket died with the thread: a lost connection for the slot, whose new socket connects again
      // (a first subscription, never answered, had no connection to lose).
      if (entry.added === undefined) entry.sink.connection('disconnected', 'its ingestion thread restarted');
      thread.send({ op: 'add', id, ...entry.sub });
      resubscribed++;
    }
    this.#logger.info(
      { thread: thread.index, reason, streams: resubscribed, delayMs },
      `KV-event ingestion thread restarted; ${resubscribed} stream(s) subscribing again`,
    );
  }

  /** The pool closed with `thread` ended: every answer still awaited from it is settled. */
  #settle(thread: IngestWorker): void {
    for (const id of thread.ids) {
      const entry = this.#attached.get(id);
      entry?.removed?.();
      entry?.added?.reject(new Error('KV-event ingestion closed'));
    }
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
      case 'added':
        this.#added(r);
        return;
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
      case 'failed':
      case 'stopped':
        // The thread's own life: its IngestWorker's.
        return;
    }
  }

  /**
   * The thread's answer to a subscription. A first one settles `attach`; a refusal of one sent again after a
   * restart (no `attach` waits for it) ends the stream's subscription, counted and logged by the sink's owner.
   */
  #added(r: Extract<IngestReport, { op: 'added' }>): void {
    const entry = this.#attached.get(r.id);
    if (entry === undefined) return;
    const added = entry.added;
    entry.added = undefined;
    if (added !== undefined) {
      if (r.error === undefined) added.resolve();
      else added.reject(new Error(r.error));
    } else if (r.error !== undefined) {
      entry.ended = true;
      entry.sink.refused(r.error);
    }
  }
}
