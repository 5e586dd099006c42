/**
 * Messages between the main thread and the preprocessing workers, typed once
 * and imported by both sides (workers/preprocess.ts and the pool client). Only
 * plain data crosses: tasks are structured-cloned in, results come back with
 * their typed arrays transferred, and errors come back as data (a thrown
 * KvgateError would lose its code crossing the thread boundary).
 */
import type { IncomingHttpHeaders } from 'node:http';
import type { InlineSystemMode, JsonMember, JsonOutline, RoutingHints } from '../../common/index.js';
import { isKvgateError, type KvgateErrorCode } from '../../errors/index.js';
import type { TokenizerSource } from '../../config/index.js';
import type { PromptHashes } from '../../wasm/index.js';
import type { EndpointKind } from '../router-port.js';
import type { TokenizerEndpoint } from '../tokenize-request.js';

/** What a thread needs to preprocess for one model (built from ModelConfig). */
export interface PreprocessModelSpec {
  name: string;
  blockSize: number;
  /** Eagle block hashing (the model's `eagle`): each block's window ends with the next token. */
  eagle?: boolean | undefined;
  tokenizer: TokenizerSource;
  /** Token ids the thread's segment cache keeps for this model (0 = no cache). */
  segmentCacheTokens: number;
  /** Bytes (keys, id arrays, per-entry overhead) the thread's segment cache may retain for this model (0 = no cache). */
  segmentCacheBytes: number;
  /** Bytes the thread's conversation cache may retain for this model (0 or absent = no cache; conversation-cache.ts). */
  conversationCacheBytes?: number;
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
  /**
   * False when the caller reads the prompt's length alone (`promptTokens`): the result's `tokenIds` is then empty, so
   * a long prompt's ids (512 KB at 128k tokens) are neither copied for it nor handed across threads. Default true.
   */
  returnTokenIds?: boolean | undefined;
}

export interface ChatTask extends TaskBase {
  kind: 'chat';
  messages: unknown[];
  tools?: unknown[] | undefined;
  /** `tools` as vLLM's template sees them, where their numbers print otherwise in JavaScript (common's `pythonToolsJson`). */
  toolsJson?: string | undefined;
  chatTemplateKwargs?: Record<string, unknown> | undefined;
  /** Default true. */
  addGenerationPrompt?: boolean | undefined;
  /** Render the last (assistant) message open-ended so the model continues it (vLLM's `continue_final_message`). */
  continueFinalMessage?: boolean | undefined;
  /** `nvext.token_data`: the ids the rendered, tokenized messages must be (else KVG_ERR_TOKEN_DATA_MISMATCH). */
  tokenData?: Uint32Array | undefined;
}

export interface TextTask extends TaskBase {
  kind: 'text';
  prompt: string;
}

/** A prompt given as token ids: only hashed. */
export interface TokensTask extends TaskBase {
  kind: 'tokens';
  tokenIds: Uint32Array;
  /** The request's field the ids came from, named by an id outside the vocabulary (default `prompt`). */
  idsParam?: 'prompt' | 'input' | 'nvext.token_data' | undefined;
}

/** Token ids back to text with the model's own tokenizer (`POST /detokenize`); special tokens are kept, as vLLM's. */
export interface DecodeTask {
  kind: 'decode';
  model: string;
  tokenIds: number[];
}

/** Answers once the thread has loaded every model (startup readiness). */
export interface PingTask {
  kind: 'ping';
}

export type PreprocessTask = ChatTask | TextTask | TokensTask;

/** A served model as a thread parsing a body sees it: a snapshot of the gateway's, taken when the body arrived. */
export interface ModelView {
  name: string;
  /** Its router port's `readsTokenIds` (absent: true): when false, the ids come back only for an answer that shows them. */
  readsTokenIds?: boolean | undefined;
  /** Adapters configured for it (the lookup's `loraAdapters`). */
  loraAdapters: string[];
  /** Adapters its port serves now (configured, or listed by its engines). */
  adapters: string[];
  maxPromptTokens: number;
  /** Its `anthropic_inline_system`. */
  anthropicInlineSystem: InlineSystemMode;
  /** Its `client_pins` (absent: `allow`, for a view made for other bodies, the picker's). */
  clientPins?: 'allow' | 'deny' | undefined;
  workers: { id: number; taints?: string[] }[];
  /**
   * True when the model has its own tokenizer; absent or false (`tokenizer: none`), the tokenizer endpoints refuse it
   * (a view made for other bodies, the picker's, need not say).
   */
  ownTokenizer?: boolean | undefined;
}

/**
 * A request body too large to parse on the main thread: every step up to the routing decision runs on a
 * preprocessing thread (request-parse.ts, then `ModelPreprocessor.run`), and only what routing reads comes back.
 */
export interface BodyTask {
  kind: 'body';
  endpoint: EndpointKind | 'route';
  /**
   * The body as received (Content-Encoding decoded); moved to the thread, not copied, when it owns its buffer, and
   * then moved back with the outcome (the main thread writes the engine's body from it).
   */
  bytes: Uint8Array;
  maxMessages: number;
  /** The request's routing headers (hints.ts). */
  headers: IncomingHttpHeaders;
  models: ModelView[];
}

/**
 * A body parsed and preprocessed on a thread: what the main thread routes by, and the engine's body as the client's
 * bytes with where their members lie, the fields laid over them, light members' values and heavy members' outlines.
 * The body's text never comes back: the main thread writes the engine's body from the bytes (common's json-text.ts).
 */
export interface BodyOutcome {
  /** The client's `model`. */
  clientModel: string;
  endpoint: EndpointKind;
  /** The configured model it resolved to, and the adapter it runs under. */
  model: string;
  loraName: string | undefined;
  stream: boolean;
  hints: RoutingHints;
  queryOnly: boolean;
  forward: {
    /** The task's bytes, moved back when they were moved to the thread; absent when the main thread kept its own. */
    bytes?: Uint8Array | undefined;
    /**
     * True when the thread kept the bytes moved to it: a query-only request, whose body is never forwarded, kept for
     * its conversation's next turn (body-reuse.ts). The main thread's body is then its light members alone.
     */
    kept?: boolean | undefined;
    /** The client body's top-level members as byte offsets into the bytes, each key once. */
    members: JsonMember[];
    light: Record<string, unknown>;
    outlines: Record<string, JsonOutline>;
    /** The fields the engine's body has instead of the client's (request-parse.ts `forwardFields`). */
    fields?: Record<string, unknown> | undefined;
  };
  /** The prompt's ids and hashes; absent when `promptError` says why not. */
  result?: PreprocessResult | undefined;
  /** Why the prompt cannot be routed: answered after the model's availability, as on the main thread. */
  promptError?: WorkerError | undefined;
}

/**
 * A tokenizer endpoint's body too large to parse on the main thread (the rule of `BodyTask`): parsed, checked, and
 * tokenized or decoded on a thread (tokenizer-task.ts, with tokenize-request.ts as the main thread uses it).
 */
export interface TokenizerBodyTask {
  kind: 'tokenizer-body';
  endpoint: TokenizerEndpoint;
  /** The body as received; moved to the thread when it owns its buffer, and not sent back (nothing forwards it). */
  bytes: Uint8Array;
  maxMessages: number;
  models: ModelView[];
}

/** What a tokenizer endpoint's body came to on a thread. */
export interface TokenizerOutcome {
  /** The model the body names (as named), for the access log. */
  clientModel: string;
  /** The configured model whose tokenizer answered. */
  model: string;
  /** The prompt's ids (`tokenize`, `count_tokens`). */
  tokenIds?: Uint32Array | undefined;
  /** The ids' text (`detokenize`). */
  text?: string | undefined;
}

export type WorkerTask = PreprocessTask | BodyTask | TokenizerBodyTask | DecodeTask | PingTask;

export interface PreprocessStats {
  /** Chat template rendering, microseconds. */
  renderUs: number;
  tokenizeUs: number;
  hashUs: number;
  /** Prompt tokens served from the segment cache or the conversation cache. */
  cachedTokens: number;
  /** Of those, the ids reused from the conversation's last prompt (conversation-cache.ts). */
  reusedTokens?: number | undefined;
  /** The conversation cache of the thread that ran it (its `threadId`), after this prompt; absent when off. */
  conversations?: { thread: number; entries: number; bytes: number } | undefined;
}

export interface PreprocessResult {
  /** The prompt's token ids; empty when the task's `returnTokenIds` was false. */
  tokenIds: Uint32Array;
  /** The prompt's length in tokens (`tokenIds.length` when the ids are returned). */
  promptTokens: number;
  /** The local block hashes and chained sequence hashes of the complete blocks. */
  hashes: PromptHashes;
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
  /**
   * An unexpected error as it was thrown on the thread (its name, message and stack), for the log only: `errorOf`
   * (task-handler.ts) makes it the cause of the KvgateError it rebuilds, which the HTTP edge answers with a fixed
   * sentence (http-io.ts `asKvgateError`), so its text never reaches a client.
   */
  thrown?: { name: string; message: string; stack?: string | undefined } | undefined;
}

/** What `WorkerError.message` says of an unexpected failure (the error itself is `thrown`). */
export const UNEXPECTED_FAILURE = 'preprocessing failed unexpectedly';

/** The buffer under `a` when `a` spans all of it (it can then be moved to another thread), else undefined. */
export function ownBuffer(a: ArrayBufferView): ArrayBuffer[] | undefined {
  return a.buffer instanceof ArrayBuffer && a.byteOffset === 0 && a.byteLength === a.buffer.byteLength
    ? [a.buffer]
    : undefined;
}

/**
 * An error as data: a KvgateError keeps its code, message and detail; anything else is an internal preprocessing
 * failure whose own message and stack travel apart, as `thrown` (never in `message`, which a caller may show).
 */
export function workerError(err: unknown): WorkerError {
  if (isKvgateError(err))
    return { code: err.code, message: err.message, detail: err.detail as Record<string, unknown> | undefined };
  const thrown =
    err instanceof Error
      ? { name: err.name, message: err.message, stack: err.stack }
      : { name: 'Error', message: String(err) };
  return { code: 'KVG_ERR_INTERNAL', message: UNEXPECTED_FAILURE, thrown };
}

export type WorkerReply =
  { ok: true; result: PreprocessResult } | { ok: false; error: WorkerError } | { ok: true; pong: true };
/** The reply to a `DecodeTask`. */
export type DecodeReply = { ok: true; text: string } | { ok: false; error: WorkerError };
/** Any task's reply. */
export type TaskReply = WorkerReply | BodyReply | DecodeReply | TokenizerReply;
/** The reply to a `TokenizerBodyTask`. */
export type TokenizerReply = { ok: true; tokenized: TokenizerOutcome } | { ok: false; error: WorkerError };
/** The reply to a `BodyTask`. */
export type BodyReply = { ok: true; body: BodyOutcome } | { ok: false; error: WorkerError };
