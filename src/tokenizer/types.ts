/**
 * The tokenizer contract shared by the gateway (preprocessing) and the mocker
 * (a simulated engine must tokenize exactly as the gateway does, or prefix
 * hashes would disagree).
 */

/** One chat message as OpenAI clients send it; `content` may be a list of parts. */
export interface ChatMessage {
  role: string;
  content?: string | readonly ChatContentPart[] | null;
  [key: string]: unknown;
}

export interface ChatContentPart {
  type: string;
  text?: string;
  [key: string]: unknown;
}

export interface RenderChatOptions {
  /** Append the assistant turn header (what every chat completion wants). Default true. */
  addGenerationPrompt?: boolean;
  /** Tool definitions, passed to the template as `tools`. */
  tools?: readonly unknown[] | undefined;
  /**
   * `tools` as Python's `json.dumps` writes vLLM's parse of them (common's `pythonToolsJson`), where their numbers print
   * otherwise in JavaScript: the compiled template renders with its parse (`1.0` printed and written by `tojson` as
   * `1.0`), the interpreter with `tools`.
   */
  toolsJson?: string | undefined;
  /** Extra template variables (vLLM's `chat_template_kwargs`, e.g. `enable_thinking`). */
  extra?: Readonly<Record<string, unknown>> | undefined;
}

export interface EncodeOptions {
  /** Let the tokenizer's post-processor add BOS/EOS. Default true (vLLM's default for completions). */
  addSpecialTokens?: boolean;
}

/**
 * Ordinary word tokens a simulated engine may generate: ids with the exact text
 * each decodes to on its own, so generated streams can be detokenized token by
 * token without incremental-decoding state. Sorted by id.
 */
export interface SampleVocabulary {
  ids: Uint32Array;
  texts: readonly string[];
}

export interface TextTokenizer {
  /** `huggingface` (a tokenizer.json) or `fallback` (the documented byte-packing tokenizer). */
  readonly kind: 'huggingface' | 'fallback';
  /** Where it came from (file path or `fallback`), for logs and /v1/models. */
  readonly source: string;
  /** Ids at or above this are not valid input tokens. */
  readonly vocabSize: number;
  encode(text: string, opts?: EncodeOptions): Promise<number[]>;
  decode(ids: readonly number[], opts?: { skipSpecialTokens?: boolean }): Promise<string>;
  /** Renders messages with the chat template into the prompt text. Throws KVG_ERR_INVALID_ARGUMENT on bad messages. */
  renderChat(messages: readonly ChatMessage[], opts?: RenderChatOptions): string;
  /** `renderChat`'s text as pieces in order (ChatTemplate.renderParts): a caller comparing renders compares pieces. */
  renderChatParts(messages: readonly ChatMessage[], opts?: RenderChatOptions): readonly string[];
  /** Word tokens for simulated generation (see SampleVocabulary). */
  sampleVocabulary(): SampleVocabulary;
  /** The ids of the special and added tokens (a chat template's role markers among them); none for the fallback. */
  specialIds(): ReadonlySet<number>;
}

/** Paths of a Hugging Face tokenizer: `tokenizer.json` and (optional) `tokenizer_config.json` with the chat template. */
export interface TokenizerFiles {
  tokenizerJson: string;
  tokenizerConfig?: string | undefined;
  /**
   * The chat template the operator named, over the config's: `'chatml'`, or the path of a Jinja file (as vLLM's
   * `--chat-template`). Undefined: the config's `chat_template`, else ChatML.
   */
  chatTemplate?: string | undefined;
}
