import { existsSync } from 'node:fs';
import { Piscina } from 'piscina';
import { describe, expect, it } from 'vitest';
import { createPreprocessor, preprocessWorkerFile } from '../../src/frontend/index.js';
import type { PreprocessWorkerData, WorkerReply } from '../../src/frontend/preprocess/protocol.js';
import { isKvgateError } from '../../src/errors/index.js';

describe('workers/preprocess (compiled: run `npm run build` first)', () => {
  it('is found relative to the compiled module', () => {
    const file = preprocessWorkerFile();
    expect(file.endsWith('dist/workers/preprocess.js')).toBe(true);
    expect(existsSync(file)).toBe(true);
  });

  it('answers ping, token and text tasks with typed arrays or error replies', async () => {
    const workerData: PreprocessWorkerData = {
      models: [
        {
          name: 'm',
          blockSize: 4,
          tokenizer: { kind: 'none', onMissing: 'approximate' },
          segmentCacheTokens: 0,
          segmentCacheBytes: 0,
        },
      ],
    };
    const pool = new Piscina({
      filename: preprocessWorkerFile(),
      workerData,
      minThreads: 1,
      maxThreads: 1,
      atomics: 'disabled',
    });
    try {
      expect(await pool.run({ kind: 'ping' })).toEqual({ ok: true, pong: true });
      const ids = Uint32Array.from({ length: 10 }, (_, i) => i);
      const reply = (await pool.run({
        kind: 'tokens',
        model: 'm',
        tokenIds: ids,
        maxPromptTokens: 100,
      })) as WorkerReply;
      expect(reply.ok).toBe(true);
      if (!reply.ok || 'pong' in reply) throw new Error('unexpected reply');
      expect([...reply.result.tokenIds]).toEqual([...ids]);
      expect(reply.result.hashes.local.length).toBe(2);
      const bad = (await pool.run({
        kind: 'text',
        model: 'm',
        prompt: 'x'.repeat(400),
        maxPromptTokens: 10,
      })) as WorkerReply;
      expect(bad).toMatchObject({ ok: false, error: { code: 'KVG_ERR_PROMPT_TOO_LONG' } });
    } finally {
      await pool.close();
    }
  });

  it('a model whose tokenizer cannot load stops the pool from starting, with the file named', async () => {
    const err = await createPreprocessor(
      [
        {
          name: 'm',
          blockSize: 16,
          tokenizer: { kind: 'files', files: { tokenizerJson: '/nonexistent/tokenizer.json' } },
          segmentCacheTokens: 0,
          segmentCacheBytes: 0,
        },
      ],
      { threads: 1 },
    ).catch((e: unknown) => e);
    expect(isKvgateError(err)).toBe(true);
    expect((err as Error).message).toContain('/nonexistent/tokenizer.json');
  });
});
