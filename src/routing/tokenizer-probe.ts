/**
 * The tokenizer agreement probe: does an engine turn a chat into the same
 * token ids as kvgate? If it does not (another tokenizer, chat template, or
 * special-token handling), the blocks it reports in its KV events never match
 * the prefixes kvgate hashes, and KV-aware routing to it degrades silently.
 *
 * The probe opens its own look at the worker's KV-event streams (`KvEventTap`),
 * sends the engine one canary chat as messages (so the ENGINE renders and
 * tokenizes it; `max_tokens: 1`, non-streaming, straight to the engine, so no
 * client traffic is counted), and compares the token ids of the `BlockStored`
 * events it publishes with kvgate's own tokenization of the same chat, block
 * by block. The canary opens with a nonce, so its first block is new to the
 * engine's cache and every full block of it is stored (and reported).
 *
 * ZMQ's PUB drops what it publishes before it has taken the SUB's subscription,
 * and nothing tells the SUB when that is (the handshake comes first). A canary
 * answered quickly can have its events go out before, so when none of its
 * blocks has arrived after a quarter of the wait the probe sends the canary once
 * more, behind another nonce, and takes the blocks of either: by then the
 * subscription has had the first canary's round trip and that quarter to reach
 * the engine. An engine that publishes nothing still ends inconclusive at the
 * same bound.
 *
 * The worker is routable while it is probed, so client requests store blocks
 * too. Each canary carries its own `cache_salt`, which the engine reports with
 * the blocks (vLLM in block 0's `extra_keys`, SGLang as `cache_salt`): a chain
 * that starts with it is the canary's; one that carries another salt (or LoRA
 * name) is another request's and never compared. A chain with none (an engine
 * that reports no salt) is compared as before, but a difference in its first
 * block cannot be told from another request's prefix, so it is never a mismatch.
 */
import { request } from 'undici';
import type { WorkerInfo } from '../discovery/index.js';
import { KvEventTap, dpRankEndpoint, type StoredBlocksEvent } from '../events/index.js';

/** One chat message of the canary. */
export interface CanaryMessage {
  readonly role: string;
  readonly content: string;
}

/** How many token ids of each side a mismatch report shows. */
const SHOWN_IDS = 8;

/**
 * The canary chat: a nonce first (a block the engine has not cached), then text that exercises
 * punctuation, digits, accents and CJK, long enough for several full blocks at common block sizes.
 */
function canaryMessages(nonce: string): CanaryMessage[] {
  return [
    { role: 'system', content: `${nonce} kvgate tokenizer check: answer with a single word.` },
    {
      role: 'user',
      content:
        'The quick brown fox jumps over the lazy dog, twice; then 0123456789 and 3.14159 follow. ' +
        'Café, naïve, façade and résumé are spelled with accents; 東京 and 北京 are cities. ' +
        'Tabs\tand  double  spaces, "quotes", (parentheses), [brackets], {braces} and <angle> marks: all here. ' +
        'Finally, a longer sentence about routing requests to the engine that already holds their cached prefix.',
    },
  ];
}

/** The outcome of comparing the engine's stored blocks with kvgate's token ids. */
export type BlockComparison =
  /** Every full block of kvgate's tokenization is what the engine stored. */
  | { readonly outcome: 'ok'; readonly blocks: number; readonly blockSize: number }
  /** Block `block` (engine block size) differs first, at token `offset` inside it; a few ids from there on each side. */
  | {
      readonly outcome: 'mismatch';
      readonly block: number;
      readonly offset: number;
      readonly blockSize: number;
      readonly gateway: readonly number[];
      readonly engine: readonly number[];
    }
  /**
   * The engine's blocks seen so far agree, but fewer than kvgate expects (more may still arrive). `unattributed`:
   * chains without a salt that differ from the first block (another request's, or a tokenizer that differs there).
   */
  | {
      readonly outcome: 'incomplete';
      readonly agreeing: number;
      readonly expected: number;
      readonly unattributed?: number;
    };

/** A chain of stored blocks from the root, with the salts (and LoRA names) its first event reports. */
interface RootChain {
  readonly tokens: Uint32Array;
  readonly blockSize: number;
  readonly salts: readonly string[];
}

/** What the engine reports of the request that stored `e`: SGLang's salt, or vLLM's first `extra_keys` strings. */
function saltsOf(e: StoredBlocksEvent): readonly string[] {
  return e.cacheSalt !== undefined ? [e.cacheSalt] : (e.extraKeyStrings ?? []);
}

/** The token ids of each chain of stored blocks that starts at the root, in arrival order of their first event. */
function rootChains(stored: readonly StoredBlocksEvent[]): RootChain[] {
  const byParent = new Map<bigint, StoredBlocksEvent>();
  for (const e of stored) if (e.parentHash !== null && !byParent.has(e.parentHash)) byParent.set(e.parentHash, e);
  const chains: RootChain[] = [];
  for (const root of stored) {
    if (root.parentHash !== null || root.blockHashes.length === 0) continue;
    const parts: Uint32Array[] = [];
    const seen = new Set<StoredBlocksEvent>();
    for (
      let e: StoredBlocksEvent | undefined = root;
      e !== undefined && !seen.has(e);
      e = byParent.get(e.blockHashes[e.blockHashes.length - 1]!)
    ) {
      seen.add(e);
      parts.push(e.tokenIds);
    }
    const tokens = new Uint32Array(parts.reduce((n, p) => n + p.length, 0));
    let at = 0;
    for (const p of parts) {
      tokens.set(p, at);
      at += p.length;
    }
    chains.push({ tokens, blockSize: root.blockSize, salts: saltsOf(root) });
  }
  return chains;
}

/** First index where `a` and `b` differ within their common length, or -1. */
function firstDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) if (a[i] !== b[i]) return i;
  return -1;
}

/** One chain against kvgate's ids, in the chain's block size. */
function compareChain(expected: Uint32Array, chain: Uint32Array, bs: number): BlockComparison {
  const full = Math.floor(expected.length / bs);
  const engineBlocks = Math.floor(chain.length / bs);
  const mismatch = (block: number, offset: number): BlockComparison => {
    const from = block * bs + offset;
    return {
      outcome: 'mismatch',
      block,
      offset,
      blockSize: bs,
      gateway: Array.from(expected.subarray(from, Math.min(from + SHOWN_IDS, (block + 1) * bs))),
      engine: Array.from(chain.subarray(from, Math.min(from + SHOWN_IDS, (block + 1) * bs))),
    };
  };
  for (let b = 0; b < Math.min(full, engineBlocks); b++) {
    const d = firstDiff(expected.subarray(b * bs, (b + 1) * bs), chain.subarray(b * bs, (b + 1) * bs));
    if (d >= 0) return mismatch(b, d);
  }
  if (engineBlocks < full) return { outcome: 'incomplete', agreeing: engineBlocks, expected: full };
  if (engineBlocks > full) {
    // The engine filled one more block: kvgate's partial tail must open it (the rest is what it generated).
    const tail = expected.subarray(full * bs);
    const d = firstDiff(tail, chain.subarray(full * bs, (full + 1) * bs));
    if (d >= 0) return mismatch(full, d);
    if (engineBlocks > full + 1) return mismatch(full + 1, 0);
  }
  return { outcome: 'ok', blocks: full, blockSize: bs };
}

/**
 * Compares kvgate's token ids of the canary with the blocks the engine stored (other requests store blocks
 * meanwhile). The chains that start with the canary's `salt` are the canary's, when there are any; else of the
 * chains with no salt, the one that agrees longest, but one that differs from the first block is not the canary's
 * for all kvgate can tell (counted as `unattributed`, never a mismatch). Chains with another salt are ignored. Pure.
 */
export function compareStoredBlocks(
  expected: Uint32Array,
  stored: readonly StoredBlocksEvent[],
  salt?: string,
): BlockComparison {
  const chains = rootChains(stored);
  const salted = salt === undefined ? [] : chains.filter((c) => c.salts.includes(salt));
  const attributed = salted.length > 0;
  let best: BlockComparison | undefined;
  let unattributed = 0;
  for (const { tokens, blockSize, salts } of attributed ? salted : chains) {
    if (!attributed && salts.length > 0) continue;
    const c = compareChain(expected, tokens, blockSize);
    if (!attributed && c.outcome === 'mismatch' && c.block === 0) unattributed++;
    else if (best === undefined || rank(c) > rank(best)) best = c;
  }
  return best ?? { outcome: 'incomplete', agreeing: 0, expected: -1, ...(unattributed > 0 ? { unattributed } : {}) };
}

/**
 * How far a comparison agrees: a mismatch by its first differing token (block, then offset, below `incomplete`
 * with as many agreeing blocks, which may still become ok), ok above all.
 */
function rank(c: BlockComparison): number {
  if (c.outcome === 'ok') return Infinity;
  return c.outcome === 'incomplete' ? c.agreeing + 0.5 : c.block + c.offset / (2 * c.blockSize);
}

/** One canary sent: kvgate's ids of it and the salt it carries. */
interface Canary {
  readonly ids: Uint32Array;
  readonly salt: string;
}

/**
 * The stored blocks against each canary sent: the comparison that agrees furthest. A canary's chain against
 * another canary's ids differs at the nonce, no later than it differs from its own (and carries the other salt).
 */
function compareCanaries(canaries: readonly Canary[], stored: readonly StoredBlocksEvent[]): BlockComparison {
  let best: BlockComparison | undefined;
  for (const k of canaries) {
    const c = compareStoredBlocks(k.ids, stored, k.salt);
    if (best === undefined || rank(c) > rank(best)) best = c;
  }
  return best!;
}

/** The canary's `cache_salt`: its own, so the engine reports its blocks under it and no other request's. */
function canarySalt(nonce: string): string {
  return `kvgate-canary-${nonce}`;
}

export interface TokenizerProbeOptions {
  readonly worker: WorkerInfo;
  /** The name the engine serves the model as (sent as `model`). */
  readonly servedModelName: string;
  /** kvgate's tokenization of a chat (chat template + tokenizer), as the gateway preprocesses requests. */
  readonly tokenize: (messages: readonly CanaryMessage[]) => Promise<Uint32Array>;
  /** Bound of each step: the KV-event handshake, the canary request, and the wait for its events. */
  readonly timeoutMs: number;
  /** Makes the canary's first block new to the engine's cache. */
  readonly nonce: string;
  /**
   * When none of the canary's blocks has arrived this long after its answer, it is sent once more behind another
   * nonce (its events may have gone out before the engine took the subscription). Default: a quarter of `timeoutMs`.
   */
  readonly resendAfterMs?: number | undefined;
  /** Ends the probe early (inconclusive): the gateway is stopping. */
  readonly signal?: AbortSignal | undefined;
}

/** The probe's verdict: `inconclusive` when nothing could be compared (no events, no answer), never a mismatch. */
export type TokenizerProbeResult =
  Exclude<BlockComparison, { outcome: 'incomplete' }> | { readonly outcome: 'inconclusive'; readonly reason: string };

/** Runs the probe against one worker with KV events. Never throws. */
export async function probeTokenizer(o: TokenizerProbeOptions): Promise<TokenizerProbeResult> {
  const src = o.worker.kvEvents;
  if (src === undefined) return { outcome: 'inconclusive', reason: 'the worker has no KV-event endpoint' };
  let tap: KvEventTap;
  try {
    // A rank's endpoint that cannot be derived (an ipc:// path beyond rank 0) is a stream that did not connect.
    const targets = Array.from({ length: o.worker.dpSize }, (_, i) => ({
      endpoint: dpRankEndpoint(src.endpoint, i * (src.dpPortStride ?? 1)),
      topic: src.topic,
    }));
    tap = await KvEventTap.open(targets, o.timeoutMs, o.signal);
  } catch (err) {
    return { outcome: 'inconclusive', reason: `its KV-event stream did not connect: ${(err as Error).message}` };
  }
  try {
    const first = canaryMessages(o.nonce);
    const again = canaryMessages(againNonce(o.nonce));
    let expected: Uint32Array[];
    try {
      expected = await Promise.all([o.tokenize(first), o.tokenize(again)]);
    } catch (err) {
      return { outcome: 'inconclusive', reason: `kvgate could not tokenize the canary: ${(err as Error).message}` };
    }
    const firstCanary = { messages: first, ids: expected[0]!, salt: canarySalt(o.nonce) };
    const sent = await sendCanary(o, o.nonce, firstCanary, o.timeoutMs);
    if (sent !== undefined) return { outcome: 'inconclusive', reason: sent };
    return await awaitCanaryBlocks(o, tap, firstCanary, {
      messages: again,
      ids: expected[1]!,
      salt: canarySalt(againNonce(o.nonce)),
    });
  } finally {
    await tap.close();
  }
}

/**
 * The second canary's nonce: the first's behind a prefix, so the two chats part at the nonce's first token (the
 * second's first block is new to the engine's cache too, not the first canary's block again).
 */
function againNonce(nonce: string): string {
  return `again-${nonce}`;
}

/**
 * Waits up to `o.timeoutMs` for the engine's blocks of the canary, sending `again` once (within the same bound)
 * when none has arrived after `resendAfterMs`. A chain of either canary answers; anything else waits for more.
 */
async function awaitCanaryBlocks(
  o: TokenizerProbeOptions,
  tap: KvEventTap,
  first: Canary,
  again: Canary & { readonly messages: readonly CanaryMessage[] },
): Promise<TokenizerProbeResult> {
  const start = performance.now();
  const deadline = start + o.timeoutMs;
  const resendAt = start + (o.resendAfterMs ?? o.timeoutMs / 4);
  const canaries: Canary[] = [first];
  for (;;) {
    const c = compareCanaries(canaries, tap.stored);
    if (c.outcome !== 'incomplete') return c;
    const now = performance.now();
    if (o.signal?.aborted === true) return { outcome: 'inconclusive', reason: 'kvgate is stopping' };
    if (now >= deadline) {
      return { outcome: 'inconclusive', reason: lateReason(c, o.timeoutMs) };
    }
    const resending = canaries.length === 1 && c.expected < 0;
    if (resending && now >= resendAt) {
      // Its blocks count whatever the answer: the engine stored them if it took the request. A failed send
      // leaves the wait as it was (the first canary's events may still come), bounded by the same deadline.
      canaries.push(again);
      await sendCanary(o, againNonce(o.nonce), again, deadline - now);
      continue;
    }
    await tap.next((resending ? Math.min(resendAt, deadline) : deadline) - now, o.signal);
  }
}

/** Why the wait for the canary's blocks ended without an answer (`c` is still incomplete at the deadline). */
function lateReason(c: Extract<BlockComparison, { outcome: 'incomplete' }>, timeoutMs: number): string {
  if (c.expected >= 0)
    return `only ${c.agreeing} of ${c.expected} canary blocks arrived within ${timeoutMs} ms (those agree)`;
  const none = `no BlockStored event of the canary arrived within ${timeoutMs} ms`;
  if (c.unattributed === undefined) return none;
  return (
    `${none}: ${c.unattributed} chain(s) of blocks differ from its first block and carry no cache salt to tell ` +
    "whose they are (another request's, or the engine's tokenizer differs from the first token)"
  );
}

/** POSTs a canary chat to the engine under its salt; undefined once it answered 2xx, else why not. */
async function sendCanary(
  o: TokenizerProbeOptions,
  nonce: string,
  canary: { readonly messages: readonly CanaryMessage[]; readonly salt: string },
  withinMs: number,
): Promise<string | undefined> {
  const ms = Math.max(1, Math.ceil(withinMs));
  try {
    const res = await request(new URL('/v1/chat/completions', o.worker.url), {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        'x-request-id': `kvgate-canary-${nonce}`,
        'x-kvgate-canary': 'tokenizer',
      },
      body: JSON.stringify({
        model: o.servedModelName,
        messages: canary.messages,
        max_tokens: 1,
        stream: false,
        // vLLM's and SGLang's chat request field: the engine hashes the canary's blocks under it and reports it.
        cache_salt: canary.salt,
      }),
      headersTimeout: ms,
      bodyTimeout: ms,
      signal: o.signal === undefined ? AbortSignal.timeout(ms) : AbortSignal.any([AbortSignal.timeout(ms), o.signal]),
    });
    await res.body.dump();
    return res.statusCode >= 200 && res.statusCode < 300
      ? undefined
      : `the canary request was answered ${res.statusCode}`;
  } catch (err) {
    return `the canary request failed: ${(err as Error).message}`;
  }
}
