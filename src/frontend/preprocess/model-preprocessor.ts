/**
 * Preprocessing of one model's requests: chat template, tokenization (with
 * the segment cache) and block hashing in WASM. The same class runs inside
 * the piscina workers and, with a pool size of 0, on the main thread.
 *
 * Tokenizer sources (see TokenizerSource): a tokenizer.json, the bundled demo
 * tokenizer, or none. Without one, `approximate` uses the byte-packing
 * fallback tokenizer of src/tokenizer (prefix hashes of the text bytes) and
 * `reject` refuses text prompts; token-id prompts are hashed either way.
 */
import { threadId } from 'node:worker_threads';
import { probeInlineSystem, type InlineSystemVerdict } from '../../common/index.js';
import { KvgateError } from '../../errors/index.js';
import {
  demoTokenizerFiles,
  fallbackTokenizer,
  inlineSystemRendererOf,
  loadTokenizer,
  type ChatMessage,
  type TextTokenizer,
} from '../../tokenizer/index.js';
import {
  ConversationCache,
  continuedHashes,
  joinSplit,
  ownHashes,
  textFrom,
  type Reuse,
} from './conversation-cache.js';
import type { PreprocessModelSpec, PreprocessResult, PreprocessStats, PreprocessTask } from './protocol.js';
import { PromptMemo } from './prompt-memo.js';
import { prefixOverLimit } from './prefix-probe.js';
import type { BodyEntry } from './body-reuse.js';
import { tokenFloorOf, type TokenFloor } from './prompt-floor.js';
import { SegmentTokenizer, splitTokensOf } from './segment-tokenizer.js';

function us(from: number): number {
  return Math.round((performance.now() - from) * 1000);
}

/** A prompt tokenized through the conversation cache, to remember once its hashes are known. */
interface Turn {
  key: string;
  /** The rendered prompt as the template's pieces (or a text prompt as one), and its length. */
  parts: readonly string[];
  length: number;
  inner: Uint32Array;
  bounds: Int32Array;
  reuse: Reuse | undefined;
  /** Leading ids equal to the reused conversation's (add_special_tokens ids included). */
  sharedIds: number;
}

export class ModelPreprocessor {
  readonly spec: PreprocessModelSpec;
  readonly #tok: TextTokenizer | undefined;
  readonly #segments: SegmentTokenizer | undefined;
  /** A lower bound on a text's tokens, checked before tokenizing; undefined when the tokenizer has none. */
  readonly #floor: TokenFloor | undefined;
  /** Chat prompts already rendered and tokenized (see prompt-memo.ts). */
  readonly #memo = new PromptMemo();
  /** Conversations' last prompts, so a follow-up tokenizes and hashes only what is new (conversation-cache.ts). */
  readonly #conversations: ConversationCache;

  private constructor(
    spec: PreprocessModelSpec,
    tok: TextTokenizer | undefined,
    segments: SegmentTokenizer | undefined,
    floor?: TokenFloor,
  ) {
    this.spec = spec;
    this.#tok = tok;
    this.#segments = segments;
    this.#floor = floor;
    this.#conversations = new ConversationCache(segments?.exact === true ? (spec.conversationCacheBytes ?? 0) : 0);
  }

  /**
   * Loads the model's tokenizer (once per process and file set) and prepares the segment cache.
   * @throws KvgateError KVG_ERR_INVALID_CONFIG when the tokenizer files are missing or invalid.
   */
  static async create(spec: PreprocessModelSpec): Promise<ModelPreprocessor> {
    const src = spec.tokenizer;
    if (src.kind === 'none') {
      return new ModelPreprocessor(spec, src.onMissing === 'approximate' ? fallbackTokenizer() : undefined, undefined);
    }
    const files = src.kind === 'demo' ? demoTokenizerFiles() : src.files;
    // The tokenizer, the split tokens and the floor read one parse of tokenizer.json: within this synchronous
    // stretch (tokenizerJsonOf's contract), before the await.
    const tok = loadTokenizer(files);
    const on = spec.segmentCacheTokens > 0 && spec.segmentCacheBytes > 0;
    const split = on ? splitTokensOf(files.tokenizerJson) : [];
    const floor = tokenFloorOf(files.tokenizerJson);
    const segments = await SegmentTokenizer.create(tok, split, {
      tokens: spec.segmentCacheTokens,
      bytes: spec.segmentCacheBytes,
    });
    return new ModelPreprocessor(spec, tok, segments, floor);
  }

  #inlineSystem: Promise<InlineSystemVerdict> | undefined;

  /**
   * How the model's engine places a Messages request's inline system messages, settled once by probing its chat
   * template (common's inline-system-probe.ts); undefined for a model without a tokenizer of its own.
   */
  inlineSystem(): Promise<InlineSystemVerdict> | undefined {
    if (this.#tok === undefined || this.spec.tokenizer.kind === 'none') return undefined;
    return (this.#inlineSystem ??= probeInlineSystem(inlineSystemRendererOf(this.#tok)));
  }

  /** Whether the segment cache is in use (exactness probe passed and the cache is on). */
  get segmentCache(): boolean {
    return this.#segments?.exact === true;
  }

  /** The chat body kept under `key` (body-reuse.ts), when this model's conversation cache is on and holds it. */
  lastBody(key: string): BodyEntry | undefined {
    return this.#conversations.enabled ? this.#conversations.body(key) : undefined;
  }

  /** Whether `keepBody` keeps anything: the conversation cache is on. */
  get keepsBodies(): boolean {
    return this.#conversations.enabled;
  }

  /** Keeps a chat body of this model for its conversation's next turn (when the conversation cache is on). */
  keepBody(key: string, entry: BodyEntry): void {
    if (this.#conversations.enabled) this.#conversations.keepBody(key, entry);
  }

  /** What the conversation cache holds. */
  conversationStats(): ReturnType<ConversationCache['stats']> {
    return this.#conversations.stats();
  }

  /** Segment cache counters, or undefined without a cache. */
  cacheStats(): ReturnType<SegmentTokenizer['stats']> | undefined {
    return this.#segments?.stats();
  }

  /**
   * Token ids and block hashes of a request's prompt.
   * @throws KvgateError KVG_ERR_PROMPT_TOO_LONG, KVG_ERR_TOKENIZER_UNAVAILABLE, KVG_ERR_INVALID_ARGUMENT (a message or
   *   template error), KVG_ERR_INVALID_TOKEN.
   */
  async run(task: PreprocessTask): Promise<PreprocessResult> {
    const stats = { renderUs: 0, tokenizeUs: 0, hashUs: 0, cachedTokens: 0 };
    const known = this.#known(task, stats);
    if (typeof known === 'object') return known;
    const tok = this.#textTokenizer();
    const { tokenIds, turn } = await this.#tokenize(tok, task as Exclude<PreprocessTask, { kind: 'tokens' }>, stats);
    if (known !== undefined) this.#memo.set(known, tokenIds);
    return this.#finish(task, tokenIds, tok.kind === 'fallback', stats, turn);
  }

  /**
   * `run`'s result when it needs no rendering or tokenizing (token ids, a remembered chat prompt), at once;
   * undefined when it does. Throws as `run`.
   */
  runKnown(task: PreprocessTask): PreprocessResult | undefined {
    const known = this.#known(task, { renderUs: 0, tokenizeUs: 0, hashUs: 0, cachedTokens: 0 });
    return typeof known === 'object' ? known : undefined;
  }

  /** The result when nothing needs tokenizing; else the memo key to remember the ids under (undefined: not remembered). */
  #known(task: PreprocessTask, stats: PreprocessStats): PreprocessResult | string | undefined {
    if (task.kind === 'tokens') {
      this.#checkVocabulary(task);
      return this.#finish(task, task.tokenIds, false, stats);
    }
    if (task.kind === 'chat' && task.tokenData !== undefined && this.#tok?.kind !== 'huggingface')
      throw this.#uncheckable();
    const tok = this.#textTokenizer();
    if (task.kind !== 'chat') return undefined;
    const memoKey = this.#memo.keyOf(task, task.addSpecialTokens ?? false);
    const remembered = memoKey === undefined ? undefined : this.#memo.get(memoKey);
    if (remembered === undefined) return memoKey;
    stats.cachedTokens = remembered.length;
    return this.#finish(task, remembered, tok.kind === 'fallback', stats);
  }

  /**
   * Token ids back to text with the model's own tokenizer, special tokens kept (vLLM's `/detokenize`).
   * @throws KvgateError KVG_ERR_TOKENIZER_UNAVAILABLE without the model's tokenizer (the fallback's text is not the
   *   model's), KVG_ERR_INVALID_TOKEN for an id outside its vocabulary.
   */
  async decode(tokenIds: readonly number[]): Promise<string> {
    const tok = this.#tok;
    if (tok?.kind !== 'huggingface') {
      throw new KvgateError(
        'KVG_ERR_TOKENIZER_UNAVAILABLE',
        `model ${this.spec.name} is configured without a tokenizer, so kvgate cannot detokenize for it; ` +
          "ask the model's engine (its own /detokenize) or configure the model's tokenizer",
        { model: this.spec.name },
      );
    }
    const bad = tokenIds.findIndex((id) => id >= tok.vocabSize);
    if (bad >= 0) {
      throw new KvgateError(
        'KVG_ERR_INVALID_TOKEN',
        `tokens[${bad}] is ${tokenIds[bad]}, outside the vocabulary of model ${this.spec.name} (${tok.vocabSize} ids)`,
        { param: `tokens[${bad}]` },
      );
    }
    return tok.decode(tokenIds, { skipSpecialTokens: false });
  }

  /**
   * A prompt of ids against the model's vocabulary, as vLLM checks it (an id past the tokenizer's last is refused);
   * not checked without the model's own tokenizer.
   * @throws KvgateError KVG_ERR_INVALID_TOKEN naming the first id outside it.
   */
  #checkVocabulary(task: Extract<PreprocessTask, { kind: 'tokens' }>): void {
    const tok = this.#tok;
    if (tok?.kind !== 'huggingface') return;
    const ids = task.tokenIds;
    const vocab = tok.vocabSize;
    for (let i = 0; i < ids.length; i++) {
      if (ids[i]! < vocab) continue;
      const param = task.idsParam ?? 'prompt';
      throw new KvgateError(
        'KVG_ERR_INVALID_TOKEN',
        `${param} token ${i} is ${ids[i]}, outside the vocabulary of model ${this.spec.name} (${vocab} ids)`,
        { param, index: i },
      );
    }
  }

  /** @throws KvgateError KVG_ERR_TOKENIZER_UNAVAILABLE for a model configured to reject text prompts. */
  #textTokenizer(): TextTokenizer {
    if (this.#tok !== undefined) return this.#tok;
    throw new KvgateError(
      'KVG_ERR_TOKENIZER_UNAVAILABLE',
      `model ${this.spec.name} has no tokenizer and is configured to reject text prompts; ` +
        'send token ids (a token-array prompt or nvext.token_data)',
      { model: this.spec.name },
    );
  }

  /** A chat's `nvext.token_data` cannot be checked without the model's own tokenizer. */
  #uncheckable(): KvgateError {
    return new KvgateError(
      'KVG_ERR_TOKENIZER_UNAVAILABLE',
      `model ${this.spec.name} has no tokenizer to check nvext.token_data against the messages of a chat request; ` +
        'send the ids as the prompt of a completion request, or leave nvext.token_data out',
      { model: this.spec.name, param: 'nvext.token_data' },
    );
  }

  /** The limits on the prompt's ids, a chat's `nvext.token_data` against them, then its hashes. */
  #finish(
    task: PreprocessTask,
    tokenIds: Uint32Array,
    approximate: boolean,
    stats: PreprocessStats,
    turn?: Turn,
  ): PreprocessResult {
    if (tokenIds.length > task.maxPromptTokens)
      throw this.#tooLong(`${tokenIds.length}`, tokenIds.length, task.maxPromptTokens);
    if (tokenIds.length === 0) {
      throw new KvgateError('KVG_ERR_INVALID_REQUEST', 'the prompt is empty', {
        param: task.kind === 'chat' ? 'messages' : 'prompt',
      });
    }
    if (task.kind === 'chat' && task.tokenData !== undefined) checkTokenData(task.tokenData, tokenIds);
    const promptTokens = tokenIds.length;
    // The ids handed to the caller: none when it reads the length alone, else a copy of those the conversation cache
    // keeps (the worker moves result buffers to the main thread). Fresh arrays, never shared: a moved buffer is gone.
    const ids =
      task.returnTokenIds === false ? new Uint32Array(0) : tokenIds === turn?.inner ? tokenIds.slice() : tokenIds;
    // A prompt shorter than one block has no complete block, hence no hashes: the WASM call is skipped.
    if (tokenIds.length < this.spec.blockSize) {
      const none = new BigUint64Array(0);
      return { tokenIds: ids, promptTokens, hashes: { local: none, seq: none }, approximate, stats };
    }
    const t2 = performance.now();
    const opts = { loraName: task.loraName, cacheSalt: task.cacheSalt, eagle: this.spec.eagle };
    const hashKey = `${this.spec.blockSize}\u0000${task.loraName ?? ''}\u0000${task.cacheSalt ?? ''}`;
    const prior = turn?.reuse?.entry.hashKey === hashKey ? turn.reuse.entry.hashes : undefined;
    const hashes = continuedHashes(tokenIds, this.spec.blockSize, opts, prior, turn?.sharedIds ?? 0);
    stats.hashUs = us(t2);
    if (turn !== undefined) {
      const { key, parts, length, inner, bounds } = turn;
      this.#conversations.set(key, { parts, length, inner, bounds, hashes: ownHashes(hashes), hashKey });
      stats.reusedTokens = turn.reuse?.ids ?? 0;
      stats.conversations = { thread: threadId, ...this.#conversations.stats() };
    }
    return { tokenIds: ids, promptTokens, hashes, approximate, stats };
  }

  /** Renders (chat) and tokenizes a text or chat prompt, refusing one over the token limit as early as it can. */
  async #tokenize(
    tok: TextTokenizer,
    task: Exclude<PreprocessTask, { kind: 'tokens' }>,
    stats: PreprocessStats,
  ): Promise<{ tokenIds: Uint32Array; turn?: Turn }> {
    let parts: readonly string[];
    let addSpecial: boolean;
    if (task.kind === 'chat') {
      const t0 = performance.now();
      parts = renderChat(tok, task);
      stats.renderUs = us(t0);
      addSpecial = task.addSpecialTokens ?? false;
    } else {
      parts = [task.prompt];
      addSpecial = task.addSpecialTokens ?? true;
    }
    const segments = this.#segments;
    if (this.#conversations.enabled && segments !== undefined && segments.splits(addSpecial)) {
      return this.#tokenizeTurn(tok, segments, task, parts, addSpecial, stats);
    }
    const text = textFrom(parts, 0);
    this.#refuseCertainlyTooLong(text, 0, task.maxPromptTokens);
    const t1 = performance.now();
    const over = await prefixOverLimit(tok, text, task.maxPromptTokens, addSpecial);
    if (over !== undefined) throw this.#tooLong(`more than ${over}`, over, task.maxPromptTokens);
    let tokenIds: Uint32Array;
    if (segments !== undefined) {
      const enc = await segments.encode(text, addSpecial);
      tokenIds = enc.ids;
      stats.cachedTokens = enc.cachedTokens;
    } else {
      tokenIds = Uint32Array.from(await tok.encode(text, { addSpecialTokens: addSpecial }));
    }
    stats.tokenizeUs = us(t1);
    return { tokenIds };
  }

  /**
   * Tokenizes through the conversation cache: the ids of the text this prompt shares with its conversation's last
   * one are reused, the rest is split-encoded; the early refusals see the reused ids and the new text.
   */
  async #tokenizeTurn(
    tok: TextTokenizer,
    segments: SegmentTokenizer,
    task: Exclude<PreprocessTask, { kind: 'tokens' }>,
    parts: readonly string[],
    addSpecial: boolean,
    stats: PreprocessStats,
  ): Promise<{ tokenIds: Uint32Array; turn: Turn }> {
    const t1 = performance.now();
    const key =
      task.kind === 'chat'
        ? ConversationCache.chatKey(task.messages, addSpecial)
        : ConversationCache.textKey(task.prompt, addSpecial);
    const reuse = this.#conversations.reuse(key, parts, segments.maxSplitChars);
    // Only the text after the reused split point is ever made one string: the rest stays the template's pieces.
    const tail = textFrom(parts, reuse?.chars ?? 0);
    const before = (reuse?.ids ?? 0) + segments.aroundPrefix(addSpecial);
    this.#refuseCertainlyTooLong(tail, before, task.maxPromptTokens);
    // The tail alone: its ids are those of the whole prompt after the reused ones (it starts at a split point).
    const limit = task.maxPromptTokens - before;
    const over = await prefixOverLimit(tok, tail, limit, reuse === undefined && addSpecial);
    if (over !== undefined) throw this.#tooLong(`more than ${over + before}`, over + before, task.maxPromptTokens);
    const split = await segments.encodeSplit(tail);
    const { inner, bounds } = joinSplit(reuse, split);
    // The cache keeps `inner`: `#finish` copies it for the caller when the caller takes the ids.
    const tokenIds = segments.withAround(inner, addSpecial);
    stats.cachedTokens = split.cachedTokens + (reuse?.ids ?? 0);
    stats.tokenizeUs = us(t1);
    const length = (reuse?.chars ?? 0) + tail.length;
    return { tokenIds, turn: { key, parts, length, inner, bounds, reuse, sharedIds: before } };
  }

  /**
   * Refuses, before tokenizing, a text whose token floor (after `before` ids) is already over the limit.
   * @throws KvgateError KVG_ERR_PROMPT_TOO_LONG
   */
  #refuseCertainlyTooLong(text: string, before: number, maxPromptTokens: number): void {
    if (this.#floor === undefined || before + text.length <= maxPromptTokens) return;
    const floor = before + this.#floor(text, maxPromptTokens - before);
    if (floor > maxPromptTokens) throw this.#tooLong(`at least ${floor}`, floor, maxPromptTokens);
  }

  #tooLong(count: string, promptTokens: number, maxPromptTokens: number): KvgateError {
    return new KvgateError(
      'KVG_ERR_PROMPT_TOO_LONG',
      `the prompt has ${count} tokens; the limit for model ${this.spec.name} is ${maxPromptTokens}`,
      { promptTokens, maxPromptTokens },
    );
  }
}

/**
 * A chat's `nvext.token_data` against the ids its messages give: they must be equal (prompt-task.ts says why).
 * @throws KvgateError KVG_ERR_TOKEN_DATA_MISMATCH naming the first position where they differ.
 */
function checkTokenData(tokenData: Uint32Array, promptIds: Uint32Array): void {
  const n = Math.min(tokenData.length, promptIds.length);
  let i = 0;
  while (i < n && tokenData[i] === promptIds[i]) i++;
  if (i === n && tokenData.length === promptIds.length) return;
  throw new KvgateError(
    'KVG_ERR_TOKEN_DATA_MISMATCH',
    `nvext.token_data (${tokenData.length} ids) is not the prompt of this chat request ` +
      `(${promptIds.length} ids with the model's chat template and tokenizer; they differ from position ${i}); ` +
      'an engine is sent the messages, so the request is routed by their ids: send those (POST /v1/route returns them as token_ids) ' +
      'or leave nvext.token_data out',
    {
      param: 'nvext.token_data',
      tokenDataLength: tokenData.length,
      promptTokens: promptIds.length,
      firstDifference: i,
    },
  );
}

/** Renders a chat request (as the template's pieces), honouring continue_final_message as vLLM and transformers do. */
function renderChat(tok: TextTokenizer, task: Extract<PreprocessTask, { kind: 'chat' }>): readonly string[] {
  const messages = task.messages as ChatMessage[];
  const continueFinal = task.continueFinalMessage === true;
  if (continueFinal && task.addGenerationPrompt === true) {
    throw new KvgateError(
      'KVG_ERR_INVALID_REQUEST',
      'continue_final_message and add_generation_prompt cannot both be true',
      { param: 'continue_final_message' },
    );
  }
  const parts = tok.renderChatParts(messages, {
    addGenerationPrompt: continueFinal ? false : (task.addGenerationPrompt ?? true),
    tools: task.tools,
    toolsJson: task.toolsJson,
    extra: task.chatTemplateKwargs,
  });
  if (!continueFinal) return parts;
  const text = textFrom(parts, 0);
  // Cut after the final message's content, dropping the template's end-of-turn tokens.
  const last = messages[messages.length - 1];
  const content =
    typeof last?.content === 'string'
      ? last.content
      : Array.isArray(last?.content)
        ? last.content.map((p) => (typeof p.text === 'string' ? p.text : '')).join('\n')
        : '';
  const at = content.trim() === '' ? -1 : text.lastIndexOf(content.trim());
  if (at < 0) {
    throw new KvgateError(
      'KVG_ERR_INVALID_REQUEST',
      'continue_final_message: the final message must have text content the chat template renders',
      { param: 'continue_final_message' },
    );
  }
  return [text.slice(0, at + content.trim().length)];
}
