/**
 * One preprocessing thread: a single-thread piscina pool, with a time bound on
 * each task and a replacement when its thread is lost.
 *
 * A task runs to its end on its thread (thread-queue.ts says why), so without
 * a bound one that never ends (a chat template that loops on some messages, a
 * bug) would hold its thread for good: every conversation hashed to it would
 * wait behind it until its deadline, and its request's concurrency slot would
 * stay taken. Here a task still running `taskTimeoutMs` after it reached the
 * thread ends the thread: the pool is destroyed (its worker terminated, a busy
 * loop included) and a new one started, which loads every model again before
 * it takes a task. The task that ran too long fails with
 * KVG_ERR_PREPROCESS_TIMEOUT; the tasks running beside it, cut with it, fail
 * with KVG_ERR_PREPROCESS_THREAD_LOST (retryable: their requests did nothing
 * wrong, and their bodies were moved to the thread, so they cannot be run
 * again here). A thread that dies by itself (piscina replaces it) fails its
 * tasks with KVG_ERR_PREPROCESS_THREAD_LOST too. Each loss is reported once
 * (`onLost`: the gateway logs and counts it).
 */
import { Piscina } from 'piscina';
import { KvgateError, isKvgateError } from '../../errors/index.js';
import type { PreprocessWorkerData, TaskReply, WorkerTask } from './protocol.js';

/** Why a thread was lost: a task ran past the bound, or the thread died by itself. */
export type ThreadLoss = 'timeout' | 'exit';

export interface PoolThreadOptions {
  readonly filename: string;
  readonly workerData: PreprocessWorkerData;
  /** Tasks the thread runs at once. */
  readonly slots: number;
  /** How long a task may run on the thread before the thread is replaced. */
  readonly taskTimeoutMs: number;
  /** A lost thread, once per loss: the task kind that ran too long (timeout), and the error (exit). */
  readonly onLost: (loss: ThreadLoss, detail: { task?: WorkerTask['kind']; err?: unknown }) => void;
}

export class PoolThread {
  readonly #o: PoolThreadOptions;
  #pool: Piscina<WorkerTask, TaskReply>;
  /** Settles once the current pool's thread has loaded its models (a replacement's: before it takes a task). */
  #ready: Promise<void>;
  /** Pools destroyed for a task that ran too long, with that task's run. */
  readonly #timedOut = new WeakMap<Piscina<WorkerTask, TaskReply>, object>();
  /** The errors of threads that died, already reported. */
  readonly #reported = new WeakSet<object>();
  #closed = false;

  constructor(o: PoolThreadOptions) {
    this.#o = o;
    this.#pool = this.#create();
    this.#ready = Promise.resolve();
  }

  #create(): Piscina<WorkerTask, TaskReply> {
    const pool = new Piscina<WorkerTask, TaskReply>({
      filename: this.#o.filename,
      workerData: this.#o.workerData,
      minThreads: 1,
      maxThreads: 1,
      idleTimeout: 2 ** 31 - 1,
      concurrentTasksPerWorker: this.#o.slots,
      atomics: 'disabled',
    });
    // An error of the thread while no task runs: reported, not thrown on the main thread (an 'error' event with no
    // listener would end the process). Closing, piscina's own close timeout is one (then it ends the thread).
    pool.on('error', (err: unknown) => {
      if (!this.#closed) this.#o.onLost('exit', { err });
    });
    return pool;
  }

  /** Resolves when the thread has loaded its models; rejects with the load error. */
  async ready(): Promise<void> {
    await this.#pool.run({ kind: 'ping' });
  }

  /**
   * Runs `task` on the thread, within `taskTimeoutMs` of its start there.
   * @throws KvgateError KVG_ERR_PREPROCESS_TIMEOUT (it ran too long), KVG_ERR_PREPROCESS_THREAD_LOST (its thread
   *   was lost under it).
   */
  async run(task: WorkerTask, transferList: ArrayBuffer[] | undefined): Promise<TaskReply> {
    await this.#ready;
    const pool = this.#pool;
    const run = {};
    const timer = setTimeout(() => this.#timeout(pool, run, task), this.#o.taskTimeoutMs);
    try {
      return await pool.run(task, transferList !== undefined ? { transferList } : {});
    } catch (err) {
      throw this.#lost(pool, run, err);
    } finally {
      clearTimeout(timer);
    }
  }

  /** The error a task's run rejects with, its thread's loss reported when it died by itself. */
  #lost(pool: Piscina<WorkerTask, TaskReply>, run: object, err: unknown): unknown {
    if (isKvgateError(err) || this.#closed) return err;
    const timedOut = this.#timedOut.get(pool);
    if (timedOut === run) {
      return new KvgateError(
        'KVG_ERR_PREPROCESS_TIMEOUT',
        `preprocessing this request ran past ${this.#o.taskTimeoutMs} ms (chat template and tokenization); ` +
          'it was stopped',
        { timeoutMs: this.#o.taskTimeoutMs },
      );
    }
    // The tasks of a thread that died share its error: the loss is reported once.
    if (timedOut === undefined && !this.#reported.has(err as object)) {
      if (typeof err === 'object' && err !== null) this.#reported.add(err);
      this.#o.onLost('exit', { err });
    }
    return new KvgateError(
      'KVG_ERR_PREPROCESS_THREAD_LOST',
      'the preprocessing thread running this request ended under it (it was restarted); retry the request',
      {},
      { cause: err },
    );
  }

  /** A task ran too long: its thread is terminated and replaced, unless that already happened. */
  #timeout(pool: Piscina<WorkerTask, TaskReply>, run: object, task: WorkerTask): void {
    if (pool !== this.#pool || this.#closed) return;
    this.#timedOut.set(pool, run);
    this.#o.onLost('timeout', { task: task.kind });
    this.#pool = this.#create();
    // The replacement loads its models before any task reaches it, so its load is not counted against a task.
    this.#ready = this.ready().catch((err: unknown) => this.#o.onLost('exit', { err }));
    void pool.destroy();
  }

  async close(): Promise<void> {
    this.#closed = true;
    await this.#ready;
    await this.#pool.close();
  }
}
