/**
 * The task handler both execution modes share: it owns one ModelPreprocessor
 * per model and turns tasks into replies, errors included (as data, so they
 * keep their codes across the thread boundary).
 */
import { KvgateError, isKvgateError } from '../../errors/index.js';
import { ModelPreprocessor } from './model-preprocessor.js';
import type { PreprocessModelSpec, PreprocessResult, PreprocessTask, WorkerReply, WorkerTask } from './protocol.js';

export type TaskHandler = ((task: WorkerTask) => Promise<WorkerReply>) & {
  /** The model preprocessors, for stats and tests. */
  readonly models: ReadonlyMap<string, ModelPreprocessor>;
  /**
   * The result at once when the task needs no rendering or tokenizing (`ModelPreprocessor.runKnown`); undefined
   * otherwise, and for an unknown model (the handler answers that). Throws the KvgateErrors the handler would reply.
   */
  readonly known: (task: PreprocessTask) => PreprocessResult | undefined;
};

/** Loads every model's tokenizer, then handles tasks. */
export async function createTaskHandler(specs: readonly PreprocessModelSpec[]): Promise<TaskHandler> {
  const models = new Map<string, ModelPreprocessor>();
  for (const spec of specs) models.set(spec.name, await ModelPreprocessor.create(spec));
  const handle = async (task: WorkerTask): Promise<WorkerReply> => {
    if (task.kind === 'ping') return { ok: true, pong: true };
    const model = models.get(task.model);
    if (model === undefined) {
      return { ok: false, error: { code: 'KVG_ERR_MODEL_NOT_FOUND', message: `model ${task.model} is not served`, detail: { model: task.model } } };
    }
    try {
      return { ok: true, result: await model.run(task) };
    } catch (err) {
      if (isKvgateError(err)) return { ok: false, error: { code: err.code, message: err.message, detail: err.detail as Record<string, unknown> | undefined } };
      return { ok: false, error: { code: 'KVG_ERR_INTERNAL', message: `preprocessing failed: ${(err as Error).message}` } };
    }
  };
  const known = (task: PreprocessTask): PreprocessResult | undefined => models.get(task.model)?.runKnown(task);
  return Object.assign(handle, { models, known });
}

/** The result of a reply, or its error rethrown as a KvgateError. */
export function unwrapReply(reply: WorkerReply): PreprocessResult {
  if (!reply.ok) throw new KvgateError(reply.error.code, reply.error.message, reply.error.detail);
  if ('pong' in reply) throw new KvgateError('KVG_ERR_INTERNAL', 'preprocessing returned no result');
  return reply.result;
}

/** The buffers a reply can hand over instead of copying. */
export function replyTransferList(reply: WorkerReply): ArrayBuffer[] {
  if (!reply.ok || 'pong' in reply) return [];
  const r = reply.result;
  const out = new Set<ArrayBuffer>();
  for (const a of [r.tokenIds, r.blockHashes, r.sequenceHashes]) if (a.buffer instanceof ArrayBuffer) out.add(a.buffer);
  return [...out];
}
