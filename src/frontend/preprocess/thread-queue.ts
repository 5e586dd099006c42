/**
 * Each preprocessing thread's queue, in front of its piscina pool: the tasks
 * waiting for one of the thread's task slots (piscina's
 * `concurrentTasksPerWorker`), in arrival order, at most `bound()` of them.
 *
 * Why a queue of its own rather than piscina's `signal` and `maxQueue`:
 * piscina cancels a task that has already started by terminating its thread,
 * which would fail the other requests' tasks running beside it (a thread runs
 * several at once) and make the new thread load every tokenizer again. Here a
 * task is cancelled only while it waits: its request's signal (the client
 * left, its deadline, a forced shutdown) drops it from the queue, and with it
 * the body it holds, which never reaches the thread. A task that has started
 * runs to its end; the caller drops its result.
 *
 * Fairness: a task waits in its owner's line (the request's tenant, else its
 * client's address); a freed slot goes to the owners in turn, each its oldest
 * task, so one client that sends many slow prompts at once delays another's
 * by one of its tasks a turn, not by all of them.
 *
 * Contracts: a task is handed to piscina only while the thread has a free
 * slot, so piscina itself queues nothing (except while it restarts a thread
 * that died); `submit` rejects with the signal's reason once the signal has
 * fired before the task started, with KVG_ERR_TOO_MANY_REQUESTS when `bound()`
 * tasks already wait, and with whatever the run rejects with otherwise.
 */
import type { CancelSignal } from '../../common/index.js';
import { KvgateError } from '../../errors/index.js';
import type { TaskReply, WorkerTask } from './protocol.js';

/** A task waiting for a slot: what to run, and how to answer its caller. */
interface Waiting {
  readonly task: WorkerTask;
  readonly transferList: ArrayBuffer[] | undefined;
  readonly signal: CancelSignal | undefined;
  readonly owner: string;
  readonly resolve: (reply: TaskReply) => void;
  readonly reject: (err: unknown) => void;
  /** Drops it from the queue when its signal fires; removed from the signal once it starts. */
  readonly onAbort: () => void;
}

export interface ThreadQueueOptions {
  /** Runs a task on the thread (piscina's `run`); called at most `slots` times at once. */
  readonly run: (task: WorkerTask, transferList: ArrayBuffer[] | undefined) => Promise<TaskReply>;
  /** Tasks the thread runs at once. */
  readonly slots: number;
  /** Tasks that may wait at most, read at each submit (a reload may change it). */
  readonly bound: () => number;
  /** A waiting task dropped because its signal fired (counted by the gateway). */
  readonly onCancelled: (task: WorkerTask) => void;
}

export class ThreadQueue {
  readonly #o: ThreadQueueOptions;
  /** Insertion-ordered: the first is the oldest; a cancelled one is deleted wherever it is. */
  readonly #waiting = new Set<Waiting>();
  /** Each owner's waiting tasks, oldest first; the owners in turn order (the next to start a task first). */
  readonly #lines = new Map<string, Set<Waiting>>();
  #running = 0;

  constructor(o: ThreadQueueOptions) {
    this.#o = o;
  }

  /** Tasks waiting for a slot now. */
  get waiting(): number {
    return this.#waiting.size;
  }

  /**
   * Runs `task` when the thread has a free slot, unless `signal` fires first; `owner` (a tenant, a client address)
   * waits its turn among the owners with tasks waiting.
   * @throws KvgateError KVG_ERR_TOO_MANY_REQUESTS when the queue is full; the signal's reason once it fired
   *   before the task started.
   */
  submit(
    task: WorkerTask,
    transferList: ArrayBuffer[] | undefined,
    signal?: CancelSignal,
    owner = '',
  ): Promise<TaskReply> {
    if (signal?.aborted === true) {
      this.#o.onCancelled(task);
      return Promise.reject(signal.reason as Error);
    }
    if (this.#running < this.#o.slots && this.#waiting.size === 0) return this.#start(task, transferList);
    const bound = this.#o.bound();
    if (this.#waiting.size >= bound) {
      return Promise.reject(
        new KvgateError(
          'KVG_ERR_TOO_MANY_REQUESTS',
          `${bound} preprocessing tasks already wait for this thread, the limit; retry later`,
        ),
      );
    }
    return new Promise<TaskReply>((resolve, reject) => {
      const w: Waiting = {
        task,
        transferList,
        signal,
        owner,
        resolve,
        reject,
        onAbort: () => {
          if (!this.#remove(w)) return;
          this.#o.onCancelled(task);
          reject(signal!.reason);
        },
      };
      this.#waiting.add(w);
      const line = this.#lines.get(owner);
      if (line !== undefined) line.add(w);
      else this.#lines.set(owner, new Set([w]));
      signal?.addEventListener('abort', w.onAbort);
    });
  }

  #start(task: WorkerTask, transferList: ArrayBuffer[] | undefined): Promise<TaskReply> {
    this.#running++;
    let run: Promise<TaskReply>;
    try {
      run = this.#o.run(task, transferList);
    } catch (err) {
      run = Promise.reject(err as Error);
    }
    return run.finally(() => {
      this.#running--;
      this.#next();
    });
  }

  /** Drops a waiting task from the queue and its owner's line; false when it was not waiting. */
  #remove(w: Waiting): boolean {
    if (!this.#waiting.delete(w)) return false;
    const line = this.#lines.get(w.owner)!;
    line.delete(w);
    if (line.size === 0) this.#lines.delete(w.owner);
    return true;
  }

  /** Starts the oldest task of the owner whose turn it is, if any, in the slot just freed; that owner goes last. */
  #next(): void {
    const turn = this.#lines.entries().next();
    if (turn.done === true) return;
    const [owner, line] = turn.value;
    const w = line.values().next().value!;
    this.#remove(w);
    const rest = this.#lines.get(owner);
    if (rest !== undefined) {
      this.#lines.delete(owner);
      this.#lines.set(owner, rest);
    }
    w.signal?.removeEventListener('abort', w.onAbort);
    this.#start(w.task, w.transferList).then(w.resolve, w.reject);
  }

  /** Rejects every waiting task with `reason` (the pool is closing); running ones finish. */
  rejectWaiting(reason: Error): void {
    for (const w of this.#waiting) {
      w.signal?.removeEventListener('abort', w.onAbort);
      w.reject(reason);
    }
    this.#waiting.clear();
    this.#lines.clear();
  }
}
