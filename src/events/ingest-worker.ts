/**
 * One thread of the ingestion pool (ingest-pool.ts) on the main thread's side: the worker that holds its
 * streams' sockets now, and how that worker ends.
 *
 * zeromq aborts the whole process when a thread ends with a socket open and receiving (zeromq.js issue
 * #411), so a worker is never terminated while its sockets may be open: it is asked to `stop` (it closes
 * them, waits for its loops, says `stopped` and ends on its own; ingest-thread-runtime.ts), and one that
 * fails does the same by itself after its `failed` report. Only a worker that has not ended within
 * `STOP_TIMEOUT_MS` is terminated, with an error line when it had not said its sockets were closed.
 */
import { Worker } from 'node:worker_threads';
import { Backoff, type Logger } from '../common/index.js';
import type { IngestReport, IngestRequest } from './ingest-thread.js';
import { parseIngestThreadFailure, type IngestThreadData } from './ingest-thread-runtime.js';

/**
 * Why an ingestion thread was restarted (`kvgate_kv_event_ingest_thread_restarts_total{reason}`): it reported
 * an `uncaught_exception` or an `unhandled_rejection` (and closed its sockets first); it `died` of an error its
 * handlers never heard (its `error` event: out of memory under its resource limits, a failure to load); it
 * `exited` without a word (`process.exit` in the thread).
 */
export type IngestThreadRestartReason = 'uncaught_exception' | 'unhandled_rejection' | 'died' | 'exited';

/** Why a worker ended when nobody asked it to. */
export interface IngestThreadEnd {
  readonly reason: IngestThreadRestartReason;
  readonly error: string;
}

/** How long a worker asked to stop, or that failed, has to close its sockets and end before it is terminated. */
const STOP_TIMEOUT_MS = 5_000;
/**
 * A worker that ends within this long of its start was failing at once: the next start waits, a delay that
 * doubles from 100 ms to 30 s while that repeats, so that a failure every thread meets again (say, in what its
 * streams send) restarts threads a few times a minute, not in a loop. One that ran longer restarts at once.
 */
const STEADY_MS = 10_000;
const RESTART_BACKOFF_MIN_MS = 100;
const RESTART_BACKOFF_MAX_MS = 30_000;

/**
 * The test hook `KVGATE_TEST_INGEST_THREAD_FAILURE` (ingest-thread-runtime.ts, `parseIngestThreadFailure`),
 * read once: the first worker the process starts is given it, and no other, so that the worker replacing it
 * does not fail again (threads share the environment). Unset (always, outside tests) it arms nothing.
 */
let failureHook = parseIngestThreadFailure(process.env.KVGATE_TEST_INGEST_THREAD_FAILURE);

/** Test hook: the next worker started fails as `spec` says (ingest-thread-runtime.ts); undefined disarms. */
export function failNextIngestThread(spec: IngestThreadData['failure']): void {
  failureHook = spec;
}

export class IngestWorker {
  readonly index: number;
  /** The pool's ids of the streams this thread holds. */
  readonly ids = new Set<number>();
  readonly #file: string;
  readonly #logger: Logger;
  readonly #onReport: (r: IngestReport) => void;
  readonly #onExit: (end: IngestThreadEnd | undefined) => void;
  #worker: Worker | undefined;
  /** Requests awaiting the thread's answer: the thread keeps the process alive meanwhile. */
  #waiting = 0;
  #exited: Promise<void> = Promise.resolve();
  #running = false;
  /** Why the current worker ends, once known (its `failed` report, its `error` event). */
  #end: IngestThreadEnd | undefined;
  /** The current worker was asked to stop, or failed: it is closing its sockets and will end. */
  #ending = false;
  /** The current worker said its sockets are closed and its loops ended (`stopped`): terminating it is safe. */
  #socketsClosed = false;
  #deadline: NodeJS.Timeout | undefined;
  readonly #backoff = new Backoff(RESTART_BACKOFF_MIN_MS, RESTART_BACKOFF_MAX_MS, Math.random);
  #startedAt = 0;

  /**
   * @param onReport the thread's reports about its streams (not those about itself: `failed`, `stopped`).
   * @param onExit its worker ended: `undefined` when it was asked to (`stop`), otherwise why (already logged).
   */
  constructor(
    index: number,
    file: string,
    logger: Logger,
    onReport: (r: IngestReport) => void,
    onExit: (end: IngestThreadEnd | undefined) => void,
  ) {
    this.index = index;
    this.#file = file;
    this.#logger = logger;
    this.#onReport = onReport;
    this.#onExit = onExit;
  }

  /** Starts a worker (the first, or one in place of a worker that ended). */
  start(): void {
    const data: IngestThreadData = { failure: failureHook };
    failureHook = undefined;
    const worker = new Worker(this.#file, { name: `kvgate-kv-ingest-${this.index}`, workerData: data });
    if (this.#waiting === 0) worker.unref();
    this.#worker = worker;
    this.#end = undefined;
    this.#ending = false;
    this.#socketsClosed = false;
    this.#running = true;
    this.#startedAt = performance.now();
    this.#exited = new Promise((resolve) =>
      worker.once('exit', (code) => {
        this.#running = false;
        clearTimeout(this.#deadline);
        this.#deadline = undefined;
        resolve();
        this.#onExit(this.#ended(code));
      }),
    );
    worker.on('message', (r: IngestReport) => {
      if (r.op === 'failed') this.#failed(worker, r);
      else if (r.op === 'stopped') this.#socketsClosed = true;
      else this.#onReport(r);
    });
    worker.on('error', (err) => {
      // Dead already, of an error its handlers never heard (they would have reported it and closed the sockets).
      if (this.#end !== undefined) return;
      this.#end = { reason: 'died', error: err.message };
      this.#logger.error(
        { thread: this.index, streams: this.ids.size, reason: 'died', err: err.message, stack: err.stack },
        'KV-event ingestion thread died of an error its handlers could not catch: restarting it; its streams ' +
          'resubscribe and replay what was lost',
      );
    });
  }

  /** How long to wait before starting the next worker, ms: 0 after one that ran steadily, else a back-off. */
  restartDelay(): number {
    if (performance.now() - this.#startedAt >= STEADY_MS) {
      this.#backoff.reset();
      return 0;
    }
    return this.#backoff.next();
  }

  /**
   * A request to the thread. One that is ending, or has ended and waits for its restart, takes none (it is
   * dropped): the pool sends its streams again to the next worker, and settles the removals it awaited.
   */
  send(req: IngestRequest): void {
    if (!this.#ending && this.#running) this.#worker?.postMessage(req);
  }

  /**
   * Waits for the thread's `answer`. The threads do not keep the process alive (the gateway's server does),
   * except while the main thread awaits one of them: a script that closes its manager last must not exit
   * before the close resolves.
   */
  async awaiting(answer: Promise<void>): Promise<void> {
    if (this.#waiting++ === 0) this.#worker?.ref();
    try {
      await answer;
    } finally {
      // A worker ending (failed, stopping) stays referenced: the process waits for its sockets to close.
      if (--this.#waiting === 0 && !this.#ending) this.#worker?.unref();
    }
  }

  /** Asks the worker to close its sockets and end; resolves once it has (or was terminated after the deadline). */
  async stop(): Promise<void> {
    const worker = this.#worker;
    if (worker === undefined || !this.#running) return;
    // Referenced again, so the process waits for it to end before it exits.
    worker.ref();
    if (!this.#ending) {
      this.#ending = true;
      worker.postMessage({ op: 'stop' } satisfies IngestRequest);
    }
    this.#terminateLate(worker);
    await this.#exited;
  }

  /** The thread said it failed: an error line with its error; it closes its sockets and ends by itself. */
  #failed(worker: Worker, r: Extract<IngestReport, { op: 'failed' }>): void {
    if (this.#end !== undefined) return;
    this.#end = { reason: r.reason, error: r.error };
    this.#ending = true;
    // Kept referenced until it ends: the process does not exit under a thread still closing its sockets.
    worker.ref();
    this.#terminateLate(worker);
    this.#logger.error(
      { thread: this.index, streams: this.ids.size, reason: r.reason, err: r.error, stack: r.stack },
      'KV-event ingestion thread failed: it closes its sockets, then it is restarted with its streams ' +
        '(they resubscribe and replay what was lost)',
    );
  }

  /** Why the worker ended: undefined when asked to stop (and it did not fail); an unexplained end is logged here. */
  #ended(code: number): IngestThreadEnd | undefined {
    if (this.#end !== undefined || this.#ending) return this.#end;
    this.#logger.error(
      { thread: this.index, streams: this.ids.size, reason: 'exited', code },
      'KV-event ingestion thread exited unexpectedly: restarting it; its streams resubscribe and replay what was lost',
    );
    return { reason: 'exited', error: `exit code ${code}` };
  }

  /** Terminates the worker if it has not ended `STOP_TIMEOUT_MS` from now: loudly when its sockets may be open. */
  #terminateLate(worker: Worker): void {
    if (this.#deadline !== undefined) return;
    this.#deadline = setTimeout(() => {
      this.#deadline = undefined;
      if (this.#worker !== worker || !this.#running) return;
      const at = { thread: this.index, streams: this.ids.size, timeoutMs: STOP_TIMEOUT_MS };
      if (this.#socketsClosed)
        this.#logger.warn(at, 'KV-event ingestion thread closed its sockets but did not end: terminating it');
      else
        this.#logger.error(
          at,
          `KV-event ingestion thread did not close its sockets within ${STOP_TIMEOUT_MS} ms: terminating it anyway ` +
            '(zeromq aborts the process if one of them is still open and receiving)',
        );
      void worker.terminate();
    }, STOP_TIMEOUT_MS);
    this.#deadline.unref();
  }
}
