/**
 * The life of one KV-event ingestion thread around its `IngestThread` (the entry, workers/kv-ingest.ts, calls
 * `runIngestThread`): the main thread's requests in, the reports out, and the thread's end.
 *
 * A thread must never end with a ZMQ socket open and receiving: zeromq then aborts the whole process
 * (`terminate called after throwing an instance of 'Napi::Error'`, SIGABRT; zeromq.js issue #411), and a thread
 * ends so when it dies of an uncaught exception or an unhandled rejection, or is terminated. So the thread
 * catches both (`process.on` inside a worker thread hears that thread's alone), tells the main thread what
 * failed (`failed`, which the pool logs), closes every socket and waits until every receive loop and connection
 * watch has ended (`IngestThread.stop`), says so (`stopped`) and ends on its own: it stops listening to the
 * main thread, and nothing else holds its event loop. The pool then restarts it with its streams. The pool's
 * release asks the same of it (`stop`) before it would terminate it.
 *
 * Not covered: a thread killed by V8 itself (out of memory under its `resourceLimits`) runs no handler.
 */
import type { MessagePort } from 'node:worker_threads';
import { IngestThread, type IngestReport, type IngestRequest } from './ingest-thread.js';

/**
 * Test hook (`KVGATE_TEST_INGEST_THREAD_FAILURE`, read by the pool): the thread fails for real, once, from a
 * timer (nothing of its own catches it), as a bug of the thread would: after it posted batches `afterPosts`
 * times (a post carries every batch of an event-loop turn), or at the first `remove` request instead of
 * handling it (it dies mid-unsubscribe). `rejection`: an unhandled rejection rather than an uncaught exception.
 */
export type IngestThreadFailure =
  | { readonly at: 'batches'; readonly afterPosts: number; readonly rejection?: boolean | undefined }
  | { readonly at: 'remove'; readonly rejection?: boolean | undefined };

/** What the pool gives a thread it starts (`workerData`). */
export interface IngestThreadData {
  /** The test hook, armed for one thread of the process only (so its restarted thread does not fail again). */
  readonly failure?: IngestThreadFailure | undefined;
}

/**
 * Parses the test hook's value: `<posts>` (fails after that many posts of batches), `remove` (at the first
 * removal), either followed by `:rejection`. Anything else (unset, always, outside tests): no hook.
 */
export function parseIngestThreadFailure(value: string | undefined): IngestThreadFailure | undefined {
  const m = /^(\d+|remove)(:rejection)?$/.exec(value ?? '');
  if (m === null) return undefined;
  const rejection = m[2] !== undefined;
  if (m[1] === 'remove') return { at: 'remove', rejection };
  const afterPosts = Number(m[1]);
  return afterPosts > 0 ? { at: 'batches', afterPosts, rejection } : undefined;
}

/** Runs an ingestion thread on `port` (the worker's `parentPort`) until the main thread stops it or it fails. */
export function runIngestThread(port: MessagePort, data: IngestThreadData | undefined): void {
  const hook = data?.failure;
  let posts = 0;
  let fired = false;
  const fireHook = (): void => {
    if (hook === undefined || fired) return;
    fired = true;
    fail(hook);
  };
  const thread = new IngestThread((report: IngestReport, transfer?: ArrayBuffer[]) => {
    port.postMessage(report, transfer);
    if (hook?.at === 'batches' && report.op === 'batches' && ++posts >= hook.afterPosts) fireHook();
  });
  let ending = false;
  /** Ends the thread: no more requests, every socket closed and waited for, then `stopped`; the thread ends. */
  const end = (failure?: Extract<IngestReport, { op: 'failed' }>): void => {
    // A second failure while the first closes the sockets changes nothing: the first is the one reported.
    if (ending) return;
    ending = true;
    port.off('message', onRequest);
    if (failure !== undefined) port.postMessage(failure);
    void thread.stop().then(() => port.postMessage({ op: 'stopped' } satisfies IngestReport));
  };
  const failed = (reason: 'uncaught_exception' | 'unhandled_rejection', err: unknown): void =>
    end({
      op: 'failed',
      reason,
      error: err instanceof Error ? err.message : String(err),
      stack: err instanceof Error ? err.stack : undefined,
    });
  const onRequest = (req: IngestRequest): void => {
    if (req.op === 'stop') end();
    // The hook's removal is left unhandled: the thread dies with the stream's socket open, mid-unsubscribe.
    else if (req.op === 'remove' && hook?.at === 'remove' && !fired) fireHook();
    else thread.handle(req);
  };
  process.on('uncaughtException', (err) => failed('uncaught_exception', err));
  process.on('unhandledRejection', (reason) => failed('unhandled_rejection', reason));
  port.on('message', onRequest);
}

/** The test hook's failure: thrown from a timer, so that only the thread's own handlers hear it. */
function fail(hook: IngestThreadFailure): void {
  const err = new Error(`KVGATE_TEST_INGEST_THREAD_FAILURE: the ingestion thread fails (at ${hook.at})`);
  setTimeout(() => {
    if (hook.rejection === true) void Promise.reject(err);
    else throw err;
  }, 0);
}
