/**
 * Where preprocessing runs: a piscina pool of worker threads (the default),
 * or the main thread (`threads: 0`, for comparison and tiny deployments).
 * Both run the same task handler; the pool adds a structured clone of the
 * task in and a transfer of the typed arrays out, so with a pool, prompts
 * cheaper than that round trip (token ids, short text of a few messages:
 * `INLINE_MAX_CHARS`, `INLINE_MAX_MESSAGES`) still run on the main thread.
 *
 * With a pool, a body over `INLINE_MAX_BODY_BYTES` is not even parsed on the
 * main thread (`runBody`; a tokenizer endpoint's, `runTokenizerBody`): its
 * JSON parse, schema check and the clone of a task would cost the event loop
 * milliseconds to hundreds of them; the pool does all of it and sends back
 * what routing reads (body-task.ts), or the ids (tokenizer-task.ts). On the
 * main thread (`threads: 0`) every request holds the event loop for its parse,
 * template and tokenization (README, "Preprocessing").
 *
 * The pool loads the compiled worker, dist/workers/preprocess.js, found
 * relative to this module: beside it in the built package, or under dist/
 * when this module runs from TypeScript sources (tests run after `npm run build`).
 */
import { existsSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { CancelSignal, InlineSystemVerdict } from '../../common/index.js';
import { GATEWAY_DEFAULTS, type GatewayConfig } from '../../config/index.js';
import { KvgateError, isKvgateError } from '../../errors/index.js';
import {
  ownBuffer,
  UNEXPECTED_FAILURE,
  type BodyOutcome,
  type BodyTask,
  type DecodeTask,
  type PreprocessModelSpec,
  type PreprocessResult,
  type PreprocessTask,
  type PreprocessWorkerData,
  type TokenizerBodyTask,
  type TokenizerOutcome,
  type WorkerTask,
} from './protocol.js';
import { bodyAffinity, taskAffinity } from './affinity.js';
import { ConversationTally } from './conversation-tally.js';
import { PoolThread, type PoolThreadOptions, type ThreadLoss } from './pool-thread.js';
import { ThreadQueue } from './thread-queue.js';
import {
  createTaskHandler,
  unwrapBodyReply,
  unwrapDecodeReply,
  unwrapReply,
  unwrapTokenizerReply,
  type TaskHandler,
} from './task-handler.js';

/**
 * Every method that may run on a pool thread takes the request's signal: a task still waiting for its thread when
 * the signal fires (the client left, its deadline, a forced shutdown) is dropped, and the call rejects with the
 * signal's reason; one already running finishes (thread-queue.ts says why), and the caller drops its result. A
 * thread's queue that already holds `maxQueued` tasks refuses more: KVG_ERR_TOO_MANY_REQUESTS. Their `owner` (the
 * request's tenant, else its client's address) is whose turn a waiting task takes (thread-queue.ts).
 */
export interface Preprocessor {
  readonly mode: 'pool' | 'main-thread';
  /** Worker threads (0 on the main thread). */
  readonly threads: number;
  /**
   * Tasks each thread's queue holds at most (default `DEFAULT_MAX_QUEUED`): the gateway sets it to
   * `limits.max_concurrent_requests`, which its requests, each waiting on one task at most, then never reach.
   */
  maxQueued: number;
  /** Called for each task dropped from a queue because its signal fired (the gateway counts them). */
  onCancelled: ((task: WorkerTask['kind']) => void) | undefined;
  /** Called once for each thread lost (a task past the time bound, or the thread died) and replaced (pool-thread.ts). */
  onThreadLost: ((loss: ThreadLoss, detail: { task?: WorkerTask['kind']; err?: unknown }) => void) | undefined;
  /** Tokenize and hash one prompt. Rejects with a KvgateError (prompt too long, template error, ...). */
  run(task: PreprocessTask, signal?: CancelSignal, owner?: string): Promise<PreprocessResult>;
  /** Whether a request body of this many bytes is parsed off the main thread (`runBody`): with a pool, one over `INLINE_MAX_BODY_BYTES`. */
  offloads(bodyBytes: number): boolean;
  /**
   * Parses, checks and preprocesses a request body (body-task.ts): on a pool thread, or on the main thread without a
   * pool. Rejects with the KvgateError of a body refused before its model's availability (the prompt's own failure
   * comes back as `promptError`).
   */
  runBody(task: BodyTask, signal?: CancelSignal, owner?: string): Promise<BodyOutcome>;
  /**
   * A tokenizer endpoint's body parsed, checked and tokenized or decoded (tokenizer-task.ts), where `runBody` would
   * run a completion's body of its size. Rejects with the KvgateError the main thread's path would throw.
   */
  runTokenizerBody(task: TokenizerBodyTask, signal?: CancelSignal, owner?: string): Promise<TokenizerOutcome>;
  /** Token ids back to text with the model's tokenizer (`POST /detokenize`), where prompts are tokenized. */
  decode(task: DecodeTask, signal?: CancelSignal, owner?: string): Promise<string>;
  /** `model`'s inline-system placement as its chat template settles it (ModelPreprocessor.inlineSystem). */
  inlineSystem(model: string): Promise<InlineSystemVerdict> | undefined;
  /** What the threads' conversation caches hold and reused, from the results seen. */
  readonly conversations: ConversationTally;
  close(): Promise<void>;
}

/** Notes a result in the tally on its way to the caller. */
function noted(tally: ConversationTally, model: string, p: Promise<PreprocessResult>): Promise<PreprocessResult> {
  return p.then((r) => {
    tally.note(model, r);
    return r;
  });
}

function notedBody(tally: ConversationTally, p: Promise<BodyOutcome>): Promise<BodyOutcome> {
  return p.then((out) => {
    if (out.result !== undefined) tally.note(out.model, out.result);
    return out;
  });
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
  throw new KvgateError(
    'KVG_ERR_INTERNAL',
    `cannot find the compiled preprocessing worker (${built} or ${fromSource}); run \`npm run build\` first`,
  );
}

/**
 * Prompts up to this many characters of text (and every token-id prompt, which
 * is only hashed) are preprocessed on the main thread even with a pool: their
 * template + tokenization cost (tens to a few hundred microseconds) is below
 * the round trip to a worker thread, which measured about a millisecond here.
 */
export const INLINE_MAX_CHARS = 2048;
/** A chat of more messages than this goes to the pool however short: each message costs tens of microseconds of template rendering. */
const INLINE_MAX_MESSAGES = 8;
/**
 * A request body over this many bytes is parsed on a pool thread, not the main thread. Below it the main thread's
 * parse, schema check and hints cost well under a millisecond whatever the body holds; above it a body of small
 * values costs about 30 microseconds a kilobyte to parse, and as much to clone to a thread.
 */
const INLINE_MAX_BODY_BYTES = 16 * 1024;

/** Characters of text a task will render and tokenize, or Infinity when unknown (sent to the pool). */
export function taskTextChars(task: PreprocessTask): number {
  if (task.kind === 'tokens') return 0;
  if (task.kind === 'text') return task.prompt.length;
  if ((task.tools !== undefined && task.tools.length > 0) || task.messages.length > INLINE_MAX_MESSAGES)
    return Infinity;
  let n = 0;
  for (const m of task.messages) {
    const content = (m as { content?: unknown } | null)?.content;
    if (typeof content === 'string') n += content.length;
    else if (Array.isArray(content)) {
      for (const part of content) {
        const text = (part as { text?: unknown } | null)?.text;
        n += typeof text === 'string' ? text.length : Infinity;
      }
    } else if (content !== undefined && content !== null) return Infinity;
    if (n > INLINE_MAX_CHARS) return n;
  }
  return n;
}

/** The task's result at once when it needs no tokenizing (token ids, a remembered chat prompt), else `run()`'s. */
function knownOr(
  handler: TaskHandler,
  task: PreprocessTask,
  run: () => Promise<PreprocessResult>,
): Promise<PreprocessResult> {
  try {
    const known = handler.known(task);
    return known !== undefined ? Promise.resolve(known) : run();
  } catch (err) {
    // As the handler replies it: a KvgateError as it is, anything else as an internal preprocessing failure whose
    // cause, for the log, is the error itself (its text is not the message: a client would see that).
    return Promise.reject(
      isKvgateError(err) ? err : new KvgateError('KVG_ERR_INTERNAL', UNEXPECTED_FAILURE, {}, { cause: err }),
    );
  }
}

/** `Preprocessor.maxQueued` until the gateway sets it: the default `limits.max_concurrent_requests`. */
const DEFAULT_MAX_QUEUED = GATEWAY_DEFAULTS.maxConcurrentRequests;
/**
 * Tasks a thread runs at once: tokenization is async (the native tokenizer works on libuv threads), so a thread can
 * render one chat template while another prompt is being encoded.
 */
const TASKS_PER_THREAD = 4;
/** How long a task may run on its thread before the thread is replaced (pool-thread.ts). */
const TASK_TIMEOUT_MS = 30_000;

class PoolPreprocessor implements Preprocessor {
  readonly mode = 'pool' as const;
  readonly threads: number;
  readonly conversations = new ConversationTally();
  maxQueued = DEFAULT_MAX_QUEUED;
  onCancelled: Preprocessor['onCancelled'];
  onThreadLost: Preprocessor['onThreadLost'];
  /** One single-thread pool a thread: a conversation's turns go to one thread, where its conversation cache is (affinity.ts). */
  readonly #pools: PoolThread[];
  /** Each pool's queue (thread-queue.ts): tasks wait there, cancellable, rather than in piscina. */
  readonly #queues: ThreadQueue[];
  /** The same handler on the main thread, for prompts cheaper than a worker round trip. */
  readonly #inline: TaskHandler;
  readonly #inlineMaxChars: number;
  readonly #inlineMaxBodyBytes: number;

  constructor(
    models: readonly PreprocessModelSpec[],
    threads: number,
    inline: TaskHandler,
    bounds: { chars: number; bodyBytes: number; taskTimeoutMs: number },
  ) {
    this.threads = threads;
    this.#inline = inline;
    this.#inlineMaxChars = bounds.chars;
    this.#inlineMaxBodyBytes = bounds.bodyBytes;
    const workerData: PreprocessWorkerData = { models: [...models] };
    const filename = preprocessWorkerFile();
    const { taskTimeoutMs } = bounds;
    const onLost: PoolThreadOptions['onLost'] = (loss, detail) => this.onThreadLost?.(loss, detail);
    this.#pools = Array.from(
      { length: threads },
      () => new PoolThread({ filename, workerData, slots: TASKS_PER_THREAD, taskTimeoutMs, onLost }),
    );
    this.#queues = this.#pools.map(
      (pool) =>
        new ThreadQueue({
          run: (task, transferList) => pool.run(task, transferList),
          slots: TASKS_PER_THREAD,
          bound: () => this.maxQueued,
          onCancelled: (task) => this.onCancelled?.(task.kind),
        }),
    );
  }

  /** The queue of the thread `affinity` picks. */
  #queue(affinity: number): ThreadQueue {
    return this.#queues[affinity % this.#queues.length]!;
  }

  /** Resolves when threads have loaded their models; rejects with the load error (bad tokenizer file...). */
  async ready(): Promise<void> {
    await Promise.all(this.#pools.map((p) => p.ready()));
  }

  run(task: PreprocessTask, signal?: CancelSignal, owner?: string): Promise<PreprocessResult> {
    const run =
      taskTextChars(task) > this.#inlineMaxChars
        ? this.#pooled(task, signal, owner)
        : knownOr(this.#inline, task, async () => unwrapReply(await this.#inline(task)));
    return noted(this.conversations, task.model, run);
  }

  async #pooled(task: PreprocessTask, signal: CancelSignal | undefined, owner?: string): Promise<PreprocessResult> {
    // The prompt's token ids (token-array prompts) move to the worker instead of being copied.
    const transferList = task.kind === 'tokens' ? ownBuffer(task.tokenIds) : undefined;
    return unwrapReply(await this.#queue(taskAffinity(task)).submit(task, transferList, signal, owner));
  }

  offloads(bodyBytes: number): boolean {
    return bodyBytes > this.#inlineMaxBodyBytes;
  }

  async runBody(task: BodyTask, signal?: CancelSignal, owner?: string): Promise<BodyOutcome> {
    // The body's bytes move to the worker when they own their buffer (a body of many chunks, or a decoded one, does).
    const run = this.#queue(bodyAffinity(task.bytes)).submit(task, ownBuffer(task.bytes), signal, owner);
    return notedBody(this.conversations, run.then(unwrapBodyReply));
  }

  async runTokenizerBody(task: TokenizerBodyTask, signal?: CancelSignal, owner?: string): Promise<TokenizerOutcome> {
    // Keyed as a chat body is: a chat counted goes to the thread that holds its conversation.
    const run = this.#queue(bodyAffinity(task.bytes)).submit(task, ownBuffer(task.bytes), signal, owner);
    return unwrapTokenizerReply(await run);
  }

  inlineSystem(model: string): Promise<InlineSystemVerdict> | undefined {
    return this.#inline.models.get(model)?.inlineSystem();
  }

  async decode(task: DecodeTask, signal?: CancelSignal, owner?: string): Promise<string> {
    // Decoding keeps no per-conversation state: any thread serves it; spread by the ids' length.
    return unwrapDecodeReply(await this.#queue(task.tokenIds.length).submit(task, undefined, signal, owner));
  }

  async close(): Promise<void> {
    const closing = new KvgateError('KVG_ERR_SHUTTING_DOWN', 'the preprocessing pool is closing');
    for (const q of this.#queues) q.rejectWaiting(closing);
    await Promise.all(this.#pools.map((p) => p.close()));
  }
}

class MainThreadPreprocessor implements Preprocessor {
  readonly mode = 'main-thread' as const;
  readonly threads = 0;
  readonly conversations = new ConversationTally();
  /** Nothing waits on the main thread: every task runs as it comes (its signal is not read). */
  maxQueued = DEFAULT_MAX_QUEUED;
  onCancelled: Preprocessor['onCancelled'];
  /** The main thread is never replaced: a task that never ends holds the gateway (README, "Preprocessing"). */
  onThreadLost: Preprocessor['onThreadLost'];
  readonly #handle: TaskHandler;

  constructor(handle: TaskHandler) {
    this.#handle = handle;
  }

  run(task: PreprocessTask): Promise<PreprocessResult> {
    return noted(
      this.conversations,
      task.model,
      knownOr(this.#handle, task, async () => unwrapReply(await this.#handle(task))),
    );
  }

  offloads(): boolean {
    return false;
  }

  runBody(task: BodyTask): Promise<BodyOutcome> {
    return notedBody(this.conversations, this.#handle(task).then(unwrapBodyReply));
  }

  async runTokenizerBody(task: TokenizerBodyTask): Promise<TokenizerOutcome> {
    return unwrapTokenizerReply(await this.#handle(task));
  }

  async decode(task: DecodeTask): Promise<string> {
    return unwrapDecodeReply(await this.#handle(task));
  }

  inlineSystem(model: string): Promise<InlineSystemVerdict> | undefined {
    return this.#handle.models.get(model)?.inlineSystem();
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
export async function createPreprocessor(
  models: readonly PreprocessModelSpec[],
  opts: {
    threads: number;
    /** Default INLINE_MAX_CHARS; -1 sends every prompt to the pool. */
    inlineMaxChars?: number;
    /** Default INLINE_MAX_BODY_BYTES; -1 parses every body in the pool. */
    inlineMaxBodyBytes?: number;
    /** Default TASK_TIMEOUT_MS: how long a task may run on a pool thread before the thread is replaced. */
    taskTimeoutMs?: number;
  },
): Promise<Preprocessor> {
  const inline = await createTaskHandler(models);
  if (opts.threads <= 0) return new MainThreadPreprocessor(inline);
  const pool = new PoolPreprocessor(models, opts.threads, inline, {
    chars: opts.inlineMaxChars ?? INLINE_MAX_CHARS,
    bodyBytes: opts.inlineMaxBodyBytes ?? INLINE_MAX_BODY_BYTES,
    taskTimeoutMs: opts.taskTimeoutMs ?? TASK_TIMEOUT_MS,
  });
  try {
    await pool.ready();
  } catch (err) {
    await pool.close().catch(() => undefined);
    throw err instanceof KvgateError
      ? err
      : new KvgateError(
          'KVG_ERR_INVALID_CONFIG',
          `preprocessing threads failed to start: ${(err as Error).message}`,
          {},
          { cause: err },
        );
  }
  return pool;
}

/** What each preprocessing thread needs to know about the configured models. */
export function preprocessModelSpecs(config: GatewayConfig): PreprocessModelSpec[] {
  return config.models.map((m) => ({
    name: m.name,
    blockSize: m.blockSize,
    eagle: m.eagle,
    tokenizer: m.tokenizer,
    segmentCacheTokens: config.preprocess.segmentCacheTokens,
    segmentCacheBytes: config.preprocess.segmentCacheBytes,
    conversationCacheBytes: config.preprocess.conversationCacheBytes,
  }));
}
