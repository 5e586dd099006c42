/**
 * Reads a parsed `tokenizer.json` into the shape `ByteLevelBpe` reproduces exactly, or says why it cannot:
 * a byte-level BPE model (no byte fallback, no subword prefix or suffix, no dropout), an absent or NFC
 * normalizer, byte-level pre-tokenization behind regex splits that translate to JavaScript exactly,
 * post-processors that only add special tokens around the sequence, and added tokens without flags.
 */
import { GPT2_SPLIT, translateSplitRegex } from './bpe-regex.js';

/** What a byte-level BPE encoder needs, read from a `tokenizer.json`. */
export interface BpeShape {
  readonly vocab: Readonly<Record<string, number>>;
  /** In priority order: index 0 merges first. */
  readonly merges: readonly (readonly [string, string])[];
  /** The model takes a whole pre-token that is in the vocabulary as is, without merging. */
  readonly ignoreMerges: boolean;
  readonly nfc: boolean;
  /** Applied in order, each to the pieces of the one before (`Split` with behaviour `Isolated`). */
  readonly splits: readonly RegExp[];
  /** Added tokens: matched in the raw text, or (`normalized`) in the normalized text between those. */
  readonly added: readonly { readonly content: string; readonly id: number; readonly normalized: boolean }[];
  /** Ids the post-processor puts around a single sequence when special tokens are added. */
  readonly prefix: readonly number[];
  readonly suffix: readonly number[];
}

type Json = Record<string, unknown>;
type Read<T> = T | { refused: string };

const isObj = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);
const unset = (v: unknown): boolean => v === undefined || v === null || v === '';

function readModel(m: unknown): Read<Pick<BpeShape, 'vocab' | 'merges' | 'ignoreMerges'>> {
  if (!isObj(m) || m.type !== 'BPE') return { refused: 'model is not BPE' };
  if (m.byte_fallback === true) return { refused: 'model uses byte_fallback' };
  if (!unset(m.dropout)) return { refused: 'model uses dropout' };
  if (!unset(m.continuing_subword_prefix) || !unset(m.end_of_word_suffix))
    return { refused: 'model has a subword prefix or suffix' };
  if (!isObj(m.vocab) || !Array.isArray(m.merges)) return { refused: 'model has no vocab or merges' };
  const merges: [string, string][] = [];
  for (const x of m.merges as unknown[]) {
    const parts = typeof x === 'string' ? x.split(' ') : x;
    if (!Array.isArray(parts) || parts.length !== 2 || typeof parts[0] !== 'string' || typeof parts[1] !== 'string') {
      return { refused: 'a merge is not a pair' };
    }
    merges.push([parts[0], parts[1]]);
  }
  return { vocab: m.vocab as Record<string, number>, merges, ignoreMerges: m.ignore_merges === true };
}

function readNormalizer(n: unknown): Read<boolean> {
  if (n === null || n === undefined) return false;
  if (isObj(n) && n.type === 'NFC') return true;
  if (isObj(n) && n.type === 'Sequence' && Array.isArray(n.normalizers)) {
    const all = n.normalizers as unknown[];
    if (all.every((x) => isObj(x) && x.type === 'NFC')) return all.length > 0;
  }
  return { refused: 'normalizer is neither absent nor NFC' };
}

function byteLevelPlain(p: unknown): boolean {
  return isObj(p) && p.type === 'ByteLevel' && p.add_prefix_space === false && p.use_regex === false;
}

function readPreTokenizer(p: unknown): Read<RegExp[]> {
  const sources: string[] = [];
  if (isObj(p) && p.type === 'ByteLevel' && p.add_prefix_space === false && p.use_regex === true)
    sources.push(GPT2_SPLIT);
  else if (isObj(p) && p.type === 'Sequence' && Array.isArray(p.pretokenizers)) {
    const list = p.pretokenizers as unknown[];
    if (list.length < 2 || !byteLevelPlain(list[list.length - 1]))
      return { refused: 'pre-tokenizer does not end in a plain ByteLevel' };
    for (const s of list.slice(0, -1)) {
      if (!isObj(s) || s.type !== 'Split' || s.behavior !== 'Isolated' || s.invert !== false) {
        return { refused: 'pre-tokenizer step is not an isolating Split' };
      }
      const pat = s.pattern;
      if (!isObj(pat) || typeof pat.Regex !== 'string') return { refused: 'Split pattern is not a regex' };
      sources.push(pat.Regex);
    }
  } else return { refused: 'pre-tokenizer is not byte-level' };
  const out: RegExp[] = [];
  for (const src of sources) {
    const t = translateSplitRegex(src);
    if ('refused' in t) return { refused: `split regex: ${t.refused}` };
    out.push(t.regex);
  }
  return out;
}

function readTemplate(t: Json): Read<{ prefix: number[]; suffix: number[] }> {
  const single = t.single;
  const specials = isObj(t.special_tokens) ? t.special_tokens : {};
  if (!Array.isArray(single)) return { refused: 'TemplateProcessing without a single template' };
  const prefix: number[] = [];
  const suffix: number[] = [];
  let seen = false;
  for (const piece of single as unknown[]) {
    if (isObj(piece) && isObj(piece.Sequence) && piece.Sequence.id === 'A' && !seen) seen = true;
    else if (isObj(piece) && isObj(piece.SpecialToken) && typeof piece.SpecialToken.id === 'string') {
      const spec = specials[piece.SpecialToken.id];
      if (!isObj(spec) || !Array.isArray(spec.ids))
        return { refused: `template token ${piece.SpecialToken.id} has no ids` };
      (seen ? suffix : prefix).push(...(spec.ids as number[]));
    } else return { refused: 'TemplateProcessing piece is neither a special token nor the sequence' };
  }
  return seen ? { prefix, suffix } : { refused: 'TemplateProcessing without the sequence' };
}

/** ByteLevel post-processing only moves offsets; TemplateProcessing adds special tokens. Others are refused. */
function readPostProcessor(p: unknown): Read<{ prefix: number[]; suffix: number[] }> {
  if (p === null || p === undefined) return { prefix: [], suffix: [] };
  const steps = isObj(p) && p.type === 'Sequence' && Array.isArray(p.processors) ? (p.processors as unknown[]) : [p];
  let out = { prefix: [] as number[], suffix: [] as number[] };
  let templates = 0;
  for (const s of steps) {
    if (isObj(s) && s.type === 'ByteLevel') continue;
    if (isObj(s) && s.type === 'TemplateProcessing' && templates++ === 0) {
      const t = readTemplate(s);
      if ('refused' in t) return t;
      out = t;
    } else return { refused: `post-processor ${isObj(s) ? String(s.type) : '?'} is not supported` };
  }
  return out;
}

function readAdded(list: unknown, normalizes: boolean): Read<BpeShape['added'][number][]> {
  const out: BpeShape['added'][number][] = [];
  for (const a of Array.isArray(list) ? (list as unknown[]) : []) {
    if (!isObj(a) || typeof a.content !== 'string' || typeof a.id !== 'number')
      return { refused: 'malformed added token' };
    if (a.lstrip === true || a.rstrip === true || a.single_word === true) {
      return { refused: `added token ${a.content} uses lstrip, rstrip or single_word` };
    }
    // Matched in the normalized text, after the raw-matched ones: supported where normalizing is the identity.
    if (a.normalized === true && normalizes)
      return { refused: `added token ${a.content} is matched after normalization` };
    if (a.content.length > 0) out.push({ content: a.content, id: a.id, normalized: a.normalized === true });
  }
  return out;
}

/** The shape of a parsed `tokenizer.json` for `ByteLevelBpe`, or the first reason it is not one. */
export function readBpeShape(json: unknown): BpeShape | { refused: string } {
  if (!isObj(json)) return { refused: 'not a JSON object' };
  if (!unset(json.truncation) || !unset(json.padding)) return { refused: 'truncation or padding is set' };
  const model = readModel(json.model);
  if ('refused' in model) return model;
  const nfc = readNormalizer(json.normalizer);
  if (typeof nfc !== 'boolean') return nfc;
  const splits = readPreTokenizer(json.pre_tokenizer);
  if ('refused' in splits) return splits;
  const post = readPostProcessor(json.post_processor);
  if ('refused' in post) return post;
  const added = readAdded(json.added_tokens, nfc);
  if ('refused' in added) return added;
  // The native tokenizer gives an added token that is also a vocabulary token the vocabulary's id.
  const clash = added.find((a) => model.vocab[a.content] !== undefined && model.vocab[a.content] !== a.id);
  if (clash !== undefined) return { refused: `added token ${clash.content} has another id in the vocabulary` };
  return { ...model, nfc, splits, added, ...post };
}
