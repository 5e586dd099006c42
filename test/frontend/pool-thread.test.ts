/**
 * A preprocessing thread that dies under its tasks (a native crash, an exit): each task on it is answered
 * KVG_ERR_PREPROCESS_THREAD_LOST (503, retryable), the loss is reported once, and the thread piscina starts in
 * its place serves the next tasks. The worker is a stand-in (test/fixtures/crashing-preprocess-thread.mjs).
 */
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { PoolThread } from '../../src/frontend/preprocess/pool-thread.js';
import type { WorkerTask } from '../../src/frontend/preprocess/protocol.js';

const filename = fileURLToPath(new URL('../fixtures/crashing-preprocess-thread.mjs', import.meta.url));

describe('a preprocessing thread that dies', () => {
  it('fails the tasks on it with KVG_ERR_PREPROCESS_THREAD_LOST, reports it once, and is replaced', async () => {
    const lost: unknown[] = [];
    const thread = new PoolThread({
      filename,
      workerData: { models: [] },
      slots: 4,
      taskTimeoutMs: 10_000,
      onLost: (loss, detail) => lost.push([loss, (detail.err as Error | undefined)?.message]),
    });
    try {
      await thread.ready();
      const slow = { kind: 'ping', delayMs: 2000 } as unknown as WorkerTask;
      const beside = thread.run(slow, undefined).catch((e: unknown) => e);
      const exit = thread.run({ kind: 'decode', model: 'exit', tokenIds: [] }, undefined).catch((e: unknown) => e);
      for (const e of [await exit, await beside])
        expect(e).toMatchObject({ code: 'KVG_ERR_PREPROCESS_THREAD_LOST', retryable: true, statusCode: 503 });
      expect(lost).toEqual([['exit', 'worker exited with code: 3']]);
      expect(await thread.run({ kind: 'ping' }, undefined)).toEqual({ ok: true, pong: true });
    } finally {
      await thread.close();
    }
  });
});
