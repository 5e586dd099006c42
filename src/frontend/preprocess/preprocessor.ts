/**
 * Where preprocessing runs: a piscina pool of worker threads (the default),
 * or the main thread (`threads: 0`, for comparison and tiny deployments).
 * Both run the same task handler; the pool adds a structured clone of the
 * task in and a transfer of the typed arrays out.
 *
 * The pool loads the compiled worker, dist/workers/preprocess.js, found
 * relative to this module: beside it in the built package, or under dist/
 * when this module runs from TypeScript sources (tests run after `npm run build`).
 */
import { existsSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Piscina } from 'piscina';
import type { GatewayConfig } from '../../config/index.js';
import { KvgateError } from '../../errors/index.js';
import type { PreprocessModelSpec, PreprocessResult, PreprocessTask, PreprocessWorkerData, WorkerReply } from './protocol.js';
import { createTaskHandler, unwrapReply, type TaskHandler } from './task-handler.js';

export interface Preprocessor {
  readonly mode: 'pool' | 'main-thread';
  /** Worker threads (0 on the main thread). */
  readonly threads: number;
  /** Tokenize and hash one prompt. Rejects with a KvgateError (prompt too long, template error, ...). */
  run(task: PreprocessTask): Promise<PreprocessResult>;
  close(): Promise<void>;
}

/**
 * The compiled worker entry.
 * @throws KvgateError KVG_ERR_INTERNAL when it has not been built.
 */
export function preprocessWorkerFile(): string {
  const here = dirname(fileURLToPath(import.meta.url));
  // Built layout: dist/src/frontend/preprocess/ -> dist/workers/preprocess.js.
  const built = resolve(here, '../../../workers/preprocess.js');
  if (import.meta.url.endsWith('.js') && existsSync(built)) return built;
  // Source layout: src/frontend/preprocess/ -> dist/workers/preprocess.js.
  const fromSource = resolve(here, '../../../dist/workers/preprocess.js');
  if (existsSync(fromSource)) return fromSource;
  throw new KvgateError('KVG_ERR_INTERNAL', `cannot find the compiled preprocessing worker (${built} or ${fromSource}); run \`npm run build\` first`);
}

class PoolPreprocessor implements Preprocessor {
  readonly mode = 'pool' as const;
  readonly threads: number;
  readonly #pool: Piscina<PreprocessTask | { kind: 'ping' }, WorkerReply>;

  constructor(models: readonly PreprocessModelSpec[], threads: number) {
    this.threads = threads;
    const workerData: PreprocessWorkerData = { models: [...models] };
    this.#pool = new Piscina({
      filename: preprocessWorkerFile(),
      workerData,
      minThreads: threads,
      maxThreads: threads,
      idleTimeout: 2 ** 31 - 1,
      // Tokenization is async (the native tokenizer works on libuv threads), so a
      // thread can render one chat template while another prompt is being encoded.
      concurrentTasksPerWorker: 4,
      atomics: 'disabled',
    });
  }

  /** Resolves when threads have loaded their models; rejects with the load error (bad tokenizer file...). */
  async ready(): Promise<void> {
    await Promise.all(Array.from({ length: this.threads }, () => this.#pool.run({ kind: 'ping' })));
  }

  async run(task: PreprocessTask): Promise<PreprocessResult> {
    // The prompt's token ids (token-array prompts) move to the worker instead of being copied.
    const transferList = task.kind === 'tokens' && task.tokenIds.buffer instanceof ArrayBuffer && task.tokenIds.byteOffset === 0
      && task.tokenIds.byteLength === task.tokenIds.buffer.byteLength ? [task.tokenIds.buffer] : undefined;
    return unwrapReply(await this.#pool.run(task, transferList !== undefined ? { transferList } : {}));
  }

  async close(): Promise<void> {
    await this.#pool.close();
  }
}

class MainThreadPreprocessor implements Preprocessor {
  readonly mode = 'main-thread' as const;
  readonly threads = 0;
  readonly #handle: TaskHandler;

  constructor(handle: TaskHandler) {
    this.#handle = handle;
  }

  async run(task: PreprocessTask): Promise<PreprocessResult> {
    return unwrapReply(await this.#handle(task));
  }

  async close(): Promise<void> {
    // Nothing to release: tokenizers are shared per process.
  }
}

/**
 * A ready preprocessor: on `threads` worker threads, or on the main thread when 0.
 * Resolves once every model's tokenizer is loaded everywhere it runs.
 * @throws KvgateError when a tokenizer cannot be loaded or the worker is not built.
 */
export async function createPreprocessor(models: readonly PreprocessModelSpec[], opts: { threads: number }): Promise<Preprocessor> {
  if (opts.threads <= 0) return new MainThreadPreprocessor(await createTaskHandler(models));
  const pool = new PoolPreprocessor(models, opts.threads);
  try {
    await pool.ready();
  } catch (err) {
    await pool.close().catch(() => undefined);
    throw err instanceof KvgateError ? err : new KvgateError('KVG_ERR_INVALID_CONFIG', `preprocessing threads failed to start: ${(err as Error).message}`, {}, { cause: err });
  }
  return pool;
}

/** What each preprocessing thread needs to know about the configured models. */
export function preprocessModelSpecs(config: GatewayConfig): PreprocessModelSpec[] {
  return config.models.map((m) => ({
    name: m.name,
    blockSize: m.blockSize,
    tokenizer: m.tokenizer,
    segmentCacheTokens: config.preprocess.segmentCacheTokens,
  }));
}
