/**
 * Messages between the main thread and the preprocessing workers, typed once
 * and imported by both sides (workers/preprocess.ts and the pool client). Only
 * plain data crosses: tasks are structured-cloned in, results come back with
 * their typed arrays transferred, and errors come back as data (a thrown
 * KvgateError would lose its code crossing the thread boundary).
 */
import type { KvgateErrorCode } from '../../errors/index.js';
import type { TokenizerSource } from '../../config/index.js';

/** What a thread needs to preprocess for one model (built from ModelConfig). */
export interface PreprocessModelSpec {
  name: string;
  blockSize: number;
  tokenizer: TokenizerSource;
  /** Token ids the thread's segment cache keeps for this model (0 = no cache). */
  segmentCacheTokens: number;
  /** Bytes (keys, id arrays, per-entry overhead) the thread's segment cache may retain for this model (0 = no cache). */
  segmentCacheBytes: number;
}

/** `workerData` of the pool. */
export interface PreprocessWorkerData {
  models: PreprocessModelSpec[];
}

interface TaskBase {
  model: string;
  /** Prompts longer than this fail with KVG_ERR_PROMPT_TOO_LONG before hashing. */
  maxPromptTokens: number;
  /** LoRA adapter name, mixed into the block hash seed. */
  loraName?: string | undefined;
  /** vLLM's `cache_salt`, mixed into the block hash seed. */
  cacheSalt?: string | undefined;
  /** Let the tokenizer add BOS/EOS (vLLM's `add_special_tokens`; default false for chat, true for completions). */
  addSpecialTokens?: boolean | undefined;
}

export interface ChatTask extends TaskBase {
  kind: 'chat';
  messages: unknown[];
  tools?: unknown[] | undefined;
  chatTemplateKwargs?: Record<string, unknown> | undefined;
  /** Default true. */
  addGenerationPrompt?: boolean | undefined;
  /** Render the last (assistant) message open-ended so the model continues it (vLLM's `continue_final_message`). */
  continueFinalMessage?: boolean | undefined;
}

export interface TextTask extends TaskBase {
  kind: 'text';
  prompt: string;
}

/** A prompt given as token ids: only hashed. */
export interface TokensTask extends TaskBase {
  kind: 'tokens';
  tokenIds: Uint32Array;
}

/** Answers once the thread has loaded every model (startup readiness). */
export interface PingTask {
  kind: 'ping';
}

export type PreprocessTask = ChatTask | TextTask | TokensTask;
export type WorkerTask = PreprocessTask | PingTask;

export interface PreprocessStats {
  /** Chat template rendering, microseconds. */
  renderUs: number;
  tokenizeUs: number;
  hashUs: number;
  /** Prompt tokens served from the segment cache. */
  cachedTokens: number;
}

export interface PreprocessResult {
  tokenIds: Uint32Array;
  /** Local block hashes of the complete blocks. */
  blockHashes: BigUint64Array;
  /** Chained sequence hashes, same length. */
  sequenceHashes: BigUint64Array;
  /**
   * True when the tokens come from the byte-packing fallback tokenizer (a model
   * configured without a tokenizer): the hashes are of the text, not of the
   * engine's tokens, so they only approximate the engine's cache.
   */
  approximate: boolean;
  stats: PreprocessStats;
}

export interface WorkerError {
  code: KvgateErrorCode;
  message: string;
  detail?: Record<string, unknown> | undefined;
}

export type WorkerReply = { ok: true; result: PreprocessResult } | { ok: false; error: WorkerError } | { ok: true; pong: true };
