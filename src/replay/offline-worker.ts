/**
 * Worker-thread entry for offline replay: runs the `OfflineJob` in
 * `workerData` and posts progress, then the run (or the error).
 */
import { parentPort, workerData } from 'node:worker_threads';
import { runOfflineJob, type OfflineJob, type OfflineWorkerMessage } from './offline-job.js';

const PROGRESS_EVERY = 50;

async function main(): Promise<void> {
  const port = parentPort!;
  const post = (m: OfflineWorkerMessage): void => port.postMessage(m);
  try {
    const run = await runOfflineJob(workerData as OfflineJob, (done, total) => {
      if (done % PROGRESS_EVERY === 0 || done === total) post({ type: 'progress', done, total });
    });
    post({ type: 'done', run });
  } catch (err) {
    post({
      type: 'error',
      message: err instanceof Error ? err.message : String(err),
      code: (err as { code?: string }).code,
    });
  }
}

void main();
