/**
 * A Hugging Face tokenizer: `tokenizer.json` through the native `tokenizers`
 * package (the same Rust code transformers and vLLM use), and the chat template
 * plus BOS/EOS strings from `tokenizer_config.json`. Encoding goes through
 * `ByteLevelBpe` (the same ids, computed in JavaScript, about 5x faster) when the
 * `tokenizer.json` has a shape it reproduces exactly; decoding is always native.
 */
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { Tokenizer } from 'tokenizers';
import { KvgateError } from '../errors/index.js';
import type { Logger } from '../common/index.js';
import { ByteLevelBpe } from './byte-level-bpe.js';
import { ChatTemplate, CHATML_TEMPLATE } from './chat-template.js';
import { tokenizerJsonOf } from './tokenizer-json.js';
import type {
  ChatMessage,
  EncodeOptions,
  RenderChatOptions,
  SampleVocabulary,
  TextTokenizer,
  TokenizerFiles,
} from './types.js';

/** Word pieces with an optional byte-level (Ġ) or sentencepiece (▁) space marker. */
const WORD_TOKEN = /^[\u0120\u2581]?[A-Za-z]{2,}$/;

interface TokenizerConfigJson {
  chat_template?: string | { name: string; template: string }[];
  bos_token?: string | { content?: string } | null;
  eos_token?: string | { content?: string } | null;
}

function specialTokenText(v: TokenizerConfigJson['bos_token']): string | undefined {
  if (typeof v === 'string') return v;
  if (v !== null && typeof v === 'object' && typeof v.content === 'string') return v.content;
  return undefined;
}

function pickTemplate(t: TokenizerConfigJson['chat_template']): string | undefined {
  if (typeof t === 'string') return t;
  // Newer configs may list named templates; "default" is the chat one.
  if (Array.isArray(t)) return (t.find((x) => x.name === 'default') ?? t[0])?.template;
  return undefined;
}

/** The template an operator named (`'chatml'` or a Jinja file), or undefined when none was named. */
function namedTemplate(named: string | undefined): string | undefined {
  if (named === undefined) return undefined;
  if (named === 'chatml') return CHATML_TEMPLATE;
  try {
    return readFileSync(named, 'utf8');
  } catch (err) {
    throw new KvgateError(
      'KVG_ERR_INVALID_CONFIG',
      `cannot read chat template ${named}: ${(err as Error).message}`,
      { path: named },
      { cause: err },
    );
  }
}

class HfTextTokenizer implements TextTokenizer {
  readonly kind = 'huggingface' as const;
  readonly source: string;
  readonly vocabSize: number;
  readonly #tok: Tokenizer;
  readonly #template: ChatTemplate;
  /** The JavaScript encoder, or undefined where the tokenizer's shape is not one it reproduces. */
  readonly #bpe: ByteLevelBpe | undefined;
  #sample: SampleVocabulary | undefined;
  readonly #special: ReadonlySet<number>;

  constructor(
    source: string,
    tok: Tokenizer,
    template: ChatTemplate,
    bpe: ByteLevelBpe | undefined,
    special: ReadonlySet<number>,
  ) {
    this.source = source;
    this.#tok = tok;
    this.#template = template;
    this.#bpe = bpe;
    this.#special = special;
    this.vocabSize = tok.getVocabSize(true);
  }

  async encode(text: string, opts: EncodeOptions = {}): Promise<number[]> {
    const addSpecialTokens = opts.addSpecialTokens ?? true;
    const ids = this.#bpe?.encode(text, addSpecialTokens);
    if (ids !== undefined) return ids;
    const enc = await this.#tok.encode(text, null, { addSpecialTokens });
    return enc.getIds();
  }

  decode(ids: readonly number[], opts: { skipSpecialTokens?: boolean } = {}): Promise<string> {
    return this.#tok.decode([...ids], opts.skipSpecialTokens ?? true);
  }

  renderChat(messages: readonly ChatMessage[], opts?: RenderChatOptions): string {
    return this.#template.render(messages, opts);
  }

  renderChatParts(messages: readonly ChatMessage[], opts?: RenderChatOptions): readonly string[] {
    return this.#template.renderParts(messages, opts);
  }

  specialIds(): ReadonlySet<number> {
    return this.#special;
  }

  sampleVocabulary(): SampleVocabulary {
    if (this.#sample === undefined) {
      const entries: [number, string][] = [];
      for (const [piece, id] of Object.entries(this.#tok.getVocab(false))) {
        if (WORD_TOKEN.test(piece)) entries.push([id, piece.replace(/^[\u0120\u2581]/, ' ')]);
      }
      if (entries.length === 0) {
        throw new KvgateError(
          'KVG_ERR_INVALID_CONFIG',
          `tokenizer ${this.source} has no plain word tokens to generate from`,
          { source: this.source },
        );
      }
      entries.sort((a, b) => a[0] - b[0]);
      this.#sample = { ids: Uint32Array.from(entries.map((e) => e[0])), texts: entries.map((e) => e[1]) };
    }
    return this.#sample;
  }
}

/**
 * Loads a tokenizer from files. When `tokenizerConfig` is not given, a
 * `tokenizer_config.json` next to `tokenizer.json` is used if present. The template is the one named in
 * `files.chatTemplate`, else the config's `chat_template`, else ChatML (the gateway's config refuses a tokenizer
 * folder without `tokenizer_config.json` unless a template is named; the mocker takes ChatML).
 * `logger` hears (debug) when the template keeps the interpreter rather than compiling.
 * @throws KvgateError KVG_ERR_INVALID_CONFIG when a file is missing or does not parse.
 */
export function loadHfTokenizer(files: TokenizerFiles, logger?: Logger): TextTokenizer {
  let tok: Tokenizer;
  try {
    tok = Tokenizer.fromFile(files.tokenizerJson);
  } catch (err) {
    throw new KvgateError(
      'KVG_ERR_INVALID_CONFIG',
      `cannot load tokenizer ${files.tokenizerJson}: ${(err as Error).message}`,
      { path: files.tokenizerJson },
      { cause: err },
    );
  }
  let configPath = files.tokenizerConfig;
  if (configPath === undefined) {
    const sibling = join(dirname(files.tokenizerJson), 'tokenizer_config.json');
    if (existsSync(sibling)) configPath = sibling;
  }
  let config: TokenizerConfigJson = {};
  if (configPath !== undefined) {
    try {
      config = JSON.parse(readFileSync(configPath, 'utf8')) as TokenizerConfigJson;
    } catch (err) {
      throw new KvgateError(
        'KVG_ERR_INVALID_CONFIG',
        `cannot read tokenizer config ${configPath}: ${(err as Error).message}`,
        { path: configPath },
        { cause: err },
      );
    }
  }
  const template = new ChatTemplate(
    namedTemplate(files.chatTemplate) ?? pickTemplate(config.chat_template) ?? CHATML_TEMPLATE,
    {
      bosToken: specialTokenText(config.bos_token),
      eosToken: specialTokenText(config.eos_token),
      logger,
    },
  );
  const json = files.tokenizerJson;
  return new HfTextTokenizer(json, tok, template, jsEncoder(json), addedTokenIds(json));
}

/**
 * The ids of a `tokenizer.json`'s added tokens (its special tokens among them), read while the file's parse is
 * shared (tokenizerJsonOf); none where it does not read. (The native vocabulary with and without them took 0.7 s.)
 */
function addedTokenIds(path: string): ReadonlySet<number> {
  const ids = new Set<number>();
  try {
    const added = (tokenizerJsonOf(path) as { added_tokens?: unknown }).added_tokens;
    if (Array.isArray(added)) for (const a of added as { id?: unknown }[]) if (typeof a?.id === 'number') ids.add(a.id);
  } catch {
    // An unreadable file failed to load above; nothing to add here.
  }
  return ids;
}

/**
 * The JavaScript encoder of a `tokenizer.json` the native tokenizer has already loaded, or undefined where
 * its shape is one the encoder does not reproduce exactly (`ByteLevelBpe.fromJson` names why; the native
 * encoder then serves, with the same ids, only slower).
 */
function jsEncoder(path: string): ByteLevelBpe | undefined {
  let json: unknown;
  try {
    json = tokenizerJsonOf(path);
  } catch {
    return undefined;
  }
  const bpe = ByteLevelBpe.fromJson(json);
  return bpe instanceof ByteLevelBpe ? bpe : undefined;
}
