/**
 * The piscina worker entry for preprocessing (compiled to
 * dist/workers/preprocess.js, which the pool loads). It only loads the models
 * named in workerData and hands tasks to the shared handler; replies move
 * their typed arrays back to the main thread instead of copying them.
 */
import { move, transferableSymbol, valueSymbol, workerData } from 'piscina';
import { createTaskHandler, replyTransferList } from '../src/frontend/preprocess/task-handler.js';
import type { PreprocessWorkerData, TaskReply, WorkerTask } from '../src/frontend/preprocess/protocol.js';

const handle = await createTaskHandler((workerData as PreprocessWorkerData).models);

export default async function preprocess(task: WorkerTask): Promise<unknown> {
  const reply = await handle(task);
  const transfer = replyTransferList(reply);
  if (transfer.length === 0) return reply;
  return move({
    get [transferableSymbol](): ArrayBuffer[] {
      return transfer;
    },
    get [valueSymbol](): TaskReply {
      return reply;
    },
  } as unknown as Parameters<typeof move>[0]);
}
