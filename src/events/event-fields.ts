/**
 * The readers of one KV event's wire fields, for decode.ts: a block hash as u64 (`normaliseHash`: signed and digest
 * forms folded), a `medium` as a storage tier, `token_ids` (flat, or an Eagle engine's bigrams), `extra_keys`'
 * multimodal hashes, optional indexes and strings, and a wire value as an error message names it (`shown`). A field
 * that does not read throws an `EventError`, which the decoder reports as that event's decode error, never further.
 */
import type { DecodeOptions } from './decode.js';
import type { DecodeErrorKind, StorageTier } from './types.js';
import { HEX64 } from './extra-keys.js';

/**
 * A wire value as a decode error's message names it: a string cut to 64 characters, a container by its
 * size, never rendered whole. The engine chose the value: `String()` of a deeply nested array overflows
 * the stack (a throw out of a decoder that must never throw), and of a large one builds a message (and a
 * log line) as large as the payload.
 */
export function shown(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value.length > 64 ? `${value.slice(0, 64)}...` : value);
  if (Array.isArray(value)) return `an array of ${value.length}`;
  if (value instanceof Uint8Array) return `${value.byteLength} bytes`;
  return typeof value === 'object' && value !== null ? 'a map' : String(value);
}

/** vLLM/SGLang `medium` strings to tiers (Dynamo's mapping); null/absent is the device. */
const MEDIUM_TIERS = new Map<string, StorageTier>([
  ['GPU', 'device'],
  ['DEVICE', 'device'],
  ['CUDA', 'device'],
  ['CPU', 'host_pinned'],
  ['CPU_PINNED', 'host_pinned'],
  ['CPU_TIER1', 'host_pinned'],
  ['HOST', 'host_pinned'],
  ['CPU_TIER2', 'disk'],
  ['DISK', 'disk'],
  ['NVME', 'disk'],
  ['SSD', 'disk'],
  ['EXTERNAL', 'external'],
  ['NETWORK', 'external'],
  ['REMOTE', 'external'],
  ['SHARED', 'external'],
]);

export function mediumToTier(medium: unknown): StorageTier | undefined {
  if (medium === null || medium === undefined) return 'device';
  if (typeof medium !== 'string') return undefined;
  return MEDIUM_TIERS.get(medium) ?? MEDIUM_TIERS.get(medium.toUpperCase());
}

/** A wire hash as u64, or undefined when it is not a usable hash. */
export function normaliseHash(value: unknown): bigint | undefined {
  if (typeof value === 'bigint') return BigInt.asUintN(64, value);
  if (typeof value === 'number') return Number.isSafeInteger(value) ? BigInt.asUintN(64, BigInt(value)) : undefined;
  if (value instanceof Uint8Array) {
    if (value.byteLength === 0) return undefined;
    let h = 0n;
    for (let i = Math.max(0, value.byteLength - 8); i < value.byteLength; i++) h = (h << 8n) | BigInt(value[i]!);
    return h;
  }
  return undefined;
}

export class EventError {
  constructor(
    readonly kind: DecodeErrorKind,
    readonly message: string,
  ) {}
}

export function hashList(value: unknown, field: string): BigUint64Array {
  if (!Array.isArray(value)) throw new EventError('bad_event', `${field} is not an array`);
  const out = new BigUint64Array(value.length);
  for (let i = 0; i < value.length; i++) {
    const h = normaliseHash(value[i]);
    if (h === undefined) throw new EventError('bad_hash', `${field}[${i}] is not a block hash`);
    out[i] = h;
  }
  return out;
}

/**
 * An index or id the engines only ever send as a non-negative integer (vLLM's KV-cache group id and LoRA adapter id,
 * a window in tokens), or nil. A negative one is no engine's: the event is refused, not read as a group, a LoRA or a
 * window no engine has (the applier would treat a negative LoRA id as no LoRA, and index the blocks as the base model's).
 */
export function optionalIndex(value: unknown, field: string): number | undefined {
  if (value === null || value === undefined) return undefined;
  const n = typeof value === 'bigint' ? Number(value) : value;
  if (typeof n !== 'number' || !Number.isSafeInteger(n))
    throw new EventError('bad_event', `${field} is not an integer`);
  if (n < 0) throw new EventError('bad_event', `${field} ${n} is negative`);
  return n;
}

export function optionalString(value: unknown, field: string): string | undefined {
  if (value === null || value === undefined) return undefined;
  if (typeof value === 'string') return value;
  throw new EventError('bad_event', `${field} is not a string`);
}

export function tierOf(value: unknown): StorageTier {
  const tier = mediumToTier(value);
  if (tier === undefined) throw new EventError('unknown_medium', `medium ${shown(value)} has no storage tier`);
  return tier;
}

function u32Token(t: unknown): number | undefined {
  if (typeof t === 'number' && Number.isInteger(t) && t >= 0 && t <= 0xffffffff) return t;
  if (typeof t === 'bigint' && t >= 0n && t <= 0xffffffffn) return Number(t);
  return undefined;
}

/**
 * `token_ids` as the flat token sequence it stands for. Eagle (speculative) engines send bigrams, each position's
 * token with the next one (`[[t0, t1], [t1, t2], ...]`): n bigrams are n + 1 tokens, the last one being the token
 * after the final position, which an Eagle block's hash window ends with. `eagle` says which form came.
 */
export function tokenArray(value: unknown, opts: DecodeOptions): { flat: Uint32Array; eagle: boolean } {
  if (!Array.isArray(value)) throw new EventError('bad_event', 'token_ids is not an array');
  if (value.length > 0 && Array.isArray(value[0])) {
    if (opts.eagle !== true)
      throw new EventError(
        'bad_event',
        "token_ids holds bigrams (an Eagle engine's events) but the model's eagle is off",
      );
    return { flat: bigramTokens(value), eagle: true };
  }
  const out = new Uint32Array(value.length);
  for (let i = 0; i < value.length; i++) {
    const t = u32Token(value[i]);
    if (t === undefined) throw new EventError('bad_event', `token_ids[${i}] is not a u32 token id`);
    out[i] = t;
  }
  return { flat: out, eagle: false };
}

/** Eagle bigrams to n + 1 tokens; each pair must start with the token the previous pair ended with. */
function bigramTokens(value: unknown[]): Uint32Array {
  const out = new Uint32Array(value.length + 1);
  for (let i = 0; i < value.length; i++) {
    const p = value[i];
    const a = Array.isArray(p) && p.length === 2 ? u32Token(p[0]) : undefined;
    const b = Array.isArray(p) && p.length === 2 ? u32Token(p[1]) : undefined;
    if (a === undefined || b === undefined)
      throw new EventError('bad_event', `token_ids[${i}] is not a bigram of u32 token ids (the first entry was one)`);
    if (i > 0 && a !== out[i])
      throw new EventError('bad_event', `token_ids[${i}] does not continue the bigram before it`);
    out[i] = a;
    out[i + 1] = b;
  }
  return out;
}

/**
 * vLLM `extra_keys`: one entry per block (a tuple or nil). Entries that are
 * 64-hex-digit digests are multimodal content hashes; Dynamo's rule
 * makes the first 16 hex digits a u64 mm hash. Other entries (the LoRA name,
 * which we already mix into the seed, cache_salt, prompt-embeds digests) are
 * not reproducible from the event and are ignored.
 */
export function mmHashesOf(value: unknown, blocks: number): (bigint[] | undefined)[] | undefined {
  if (value === null || value === undefined) return undefined;
  // Not ignored: its multimodal hashes would be lost, and the blocks indexed as the text alone's.
  if (!Array.isArray(value)) throw new EventError('bad_event', `extra_keys ${shown(value)} is not an array`);
  let out: (bigint[] | undefined)[] | undefined;
  const visit = (v: unknown, block: number, depth: number): void => {
    if (typeof v === 'string' && HEX64.test(v)) {
      out ??= new Array<bigint[] | undefined>(blocks).fill(undefined);
      (out[block] ??= []).push(BigInt(`0x${v.slice(0, 16)}`));
    } else if (Array.isArray(v) && depth < 2) {
      for (const x of v) visit(x, block, depth + 1);
    }
  };
  for (let i = 0; i < value.length && i < blocks; i++) visit(value[i], i, 0);
  return out;
}
