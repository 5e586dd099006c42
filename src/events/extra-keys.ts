/**
 * What vLLM's `extra_keys` says about the request that stored the blocks, beside the multimodal digests that
 * decode.ts reads from it. vLLM writes block 0's entry (a request's first block) as the tuple of what went into
 * that block's hash beyond its tokens: the LoRA name, multimodal keys, the request's `cache_salt`, prompt-embeds
 * digests; the strings among them come unlabelled. Never hashed as such: the applier takes a root event's salt
 * from them (salt-memory.ts: the strings other than the LoRA name), and the tokenizer probe tells its salted
 * canary's blocks from other requests' by them.
 */

/** A multimodal content digest in `extra_keys` (decode.ts reads them as multimodal hashes). */
export const HEX64 = /^[0-9a-fA-F]{64}$/;

/**
 * The strings of the first entry of `extra_keys` that are not 64-hex multimodal digests (its LoRA name and cache
 * salt), as `{ extraKeyStrings }` to spread into a decoded event; `{}` when there are none. Never throws: a
 * malformed `extra_keys` is reported by the multimodal decoding.
 */
export function extraKeyStringsOf(value: unknown): { extraKeyStrings?: readonly string[] } {
  const first: unknown = Array.isArray(value) ? value[0] : undefined;
  if (!Array.isArray(first)) return {};
  const out = first.filter((v): v is string => typeof v === 'string' && v !== '' && !HEX64.test(v));
  return out.length > 0 ? { extraKeyStrings: out } : {};
}
