/**
 * The task handler both execution modes share: it owns one ModelPreprocessor
 * per model and turns tasks into replies, errors included (as data, so they
 * keep their codes across the thread boundary).
 */
import { KvgateError } from '../../errors/index.js';
import { runBodyTask } from './body-task.js';
import { ModelPreprocessor } from './model-preprocessor.js';
import { runTokenizerTask } from './tokenizer-task.js';
import {
  workerError,
  type BodyOutcome,
  type DecodeReply,
  type PreprocessModelSpec,
  type PreprocessResult,
  type PreprocessTask,
  type TaskReply,
  type TokenizerOutcome,
  type WorkerError,
  type WorkerTask,
} from './protocol.js';

export type TaskHandler = ((task: WorkerTask) => Promise<TaskReply>) & {
  /** The model preprocessors, for stats and tests. */
  readonly models: ReadonlyMap<string, ModelPreprocessor>;
  /**
   * The result at once when the task needs no rendering or tokenizing (`ModelPreprocessor.runKnown`); undefined
   * otherwise, and for an unknown model (the handler answers that). Throws the KvgateErrors the handler would reply.
   */
  readonly known: (task: PreprocessTask) => PreprocessResult | undefined;
};

/**
 * The environment's test hook, `KVGATE_TEST_PREPROCESS_FAILURE=<text>`, read as a handler is created (a pool thread's
 * when it starts): every task but the readiness ping then throws a TypeError of that text, as a bug in preprocessing
 * would (the tests' way to an unexpected failure on a thread). Unset (always, outside tests) it never fires.
 */
function failureHook(): string | undefined {
  const text = process.env.KVGATE_TEST_PREPROCESS_FAILURE;
  return text === undefined || text === '' ? undefined : text;
}

/** Loads every model's tokenizer, then handles tasks. */
export async function createTaskHandler(specs: readonly PreprocessModelSpec[]): Promise<TaskHandler> {
  const models = new Map<string, ModelPreprocessor>();
  for (const spec of specs) models.set(spec.name, await ModelPreprocessor.create(spec));
  const failure = failureHook();
  const handle = async (task: WorkerTask): Promise<TaskReply> => {
    if (task.kind === 'ping') return { ok: true, pong: true };
    try {
      if (failure !== undefined) throw new TypeError(failure);
      if (task.kind === 'body') return { ok: true, body: await runBodyTask(task, models) };
      if (task.kind === 'tokenizer-body') return { ok: true, tokenized: await runTokenizerTask(task, models) };
      const model = models.get(task.model);
      if (model === undefined) {
        return {
          ok: false,
          error: {
            code: 'KVG_ERR_MODEL_NOT_FOUND',
            message: `model ${task.model} is not served`,
            detail: { model: task.model },
          },
        };
      }
      if (task.kind === 'decode') return { ok: true, text: await model.decode(task.tokenIds) };
      return { ok: true, result: await model.run(task) };
    } catch (err) {
      return { ok: false, error: workerError(err) };
    }
  };
  const known = (task: PreprocessTask): PreprocessResult | undefined => models.get(task.model)?.runKnown(task);
  return Object.assign(handle, { models, known });
}

/** A KvgateError from its data; an unexpected error's own name, message and stack (`thrown`) become its cause. */
export function errorOf(e: WorkerError): KvgateError {
  if (e.thrown === undefined) return new KvgateError(e.code, e.message, e.detail);
  const cause = new Error(e.thrown.message);
  cause.name = e.thrown.name;
  // The thread's stack, where the error was thrown: the log prints it after the KvgateError's own.
  if (e.thrown.stack !== undefined) cause.stack = e.thrown.stack;
  return new KvgateError(e.code, e.message, e.detail, { cause });
}

/** The result of a reply, or its error rethrown as a KvgateError. */
export function unwrapReply(reply: TaskReply): PreprocessResult {
  if (!reply.ok) throw errorOf(reply.error);
  if (!('result' in reply)) throw new KvgateError('KVG_ERR_INTERNAL', 'preprocessing returned no result');
  return reply.result;
}

/** The outcome of a body task's reply, or its error rethrown as a KvgateError. */
export function unwrapBodyReply(reply: TaskReply): BodyOutcome {
  if (!reply.ok) throw errorOf(reply.error);
  if (!('body' in reply)) throw new KvgateError('KVG_ERR_INTERNAL', 'preprocessing returned no body');
  return reply.body;
}

/** The text of a decode task's reply, or its error rethrown as a KvgateError. */
export function unwrapDecodeReply(reply: TaskReply): string {
  if (!reply.ok) throw errorOf(reply.error);
  if (!('text' in reply)) throw new KvgateError('KVG_ERR_INTERNAL', 'preprocessing returned no text');
  return (reply as Extract<DecodeReply, { ok: true }>).text;
}

/** The outcome of a tokenizer body task's reply, or its error rethrown as a KvgateError. */
export function unwrapTokenizerReply(reply: TaskReply): TokenizerOutcome {
  if (!reply.ok) throw errorOf(reply.error);
  if (!('tokenized' in reply)) throw new KvgateError('KVG_ERR_INTERNAL', 'preprocessing returned no tokens');
  return reply.tokenized;
}

/** The buffers a reply can hand over instead of copying: a result's typed arrays, a body's bytes moved back, ids. */
export function replyTransferList(reply: TaskReply): ArrayBuffer[] {
  if (!reply.ok) return [];
  const out = new Set<ArrayBuffer>();
  const r = 'result' in reply ? reply.result : 'body' in reply ? reply.body.result : undefined;
  if (r !== undefined)
    for (const a of [r.tokenIds, r.hashes.local, r.hashes.seq]) if (a.buffer instanceof ArrayBuffer) out.add(a.buffer);
  const bytes = 'body' in reply ? reply.body.forward.bytes : undefined;
  if (bytes !== undefined && bytes.buffer instanceof ArrayBuffer) out.add(bytes.buffer);
  const ids = 'tokenized' in reply ? reply.tokenized.tokenIds : undefined;
  if (ids !== undefined && ids.buffer instanceof ArrayBuffer) out.add(ids.buffer);
  return [...out];
}
