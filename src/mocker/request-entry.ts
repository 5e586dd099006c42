/**
 * One request inside the engine core: its tokens (prompt, then generated),
 * its blocks and how far it is computed. Only EngineCore mutates it.
 */
import { KvgateError } from '../errors/index.js';
import { promptHashes } from '../wasm/index.js';
import { ContextSampler } from './context-sampler.js';
import type { Block } from './kv-cache.js';
import type { CoreRequest } from './engine-types.js';

export type RequestState = 'waiting' | 'transferring' | 'running';

export class RequestEntry {
  readonly id: string;
  readonly tokens: number[];
  readonly promptLen: number;
  readonly maxTokens: number;
  readonly loraName: string | undefined;
  readonly cacheSalt: string | undefined;
  readonly remotePrefill: boolean;
  readonly holdBlocksMs: number | undefined;
  /** Lower is admitted first, and preempted last, under the `priority` scheduling policy. */
  readonly priority: number;
  /** Draws the next generated token from the context so far and the request's seed. */
  readonly sampler: ContextSampler;
  readonly addedAt: number;
  /** Sequence hashes of full blocks known so far (prompt blocks up front, generated ones as they fill). */
  readonly seqHashes: bigint[];
  state: RequestState = 'waiting';
  blocks: Block[] = [];
  numComputed = 0;
  /** Blocks of `blocks` already past the caching decision (cached, or private duplicates). */
  committed = 0;
  outputs = 0;
  cachedTokens = -1;
  transferDone = false;
  readyAt = 0;

  constructor(r: CoreRequest, now: number, blockSize: number) {
    this.id = r.id;
    this.tokens = Array.from(r.promptTokens);
    this.promptLen = this.tokens.length;
    this.maxTokens = r.maxTokens;
    this.loraName = r.loraName || undefined;
    this.cacheSalt = r.cacheSalt || undefined;
    this.remotePrefill = r.remotePrefill === true;
    this.holdBlocksMs = r.holdBlocksMs;
    this.priority = r.priority ?? 0;
    if (!Number.isSafeInteger(this.priority))
      throw new KvgateError('KVG_ERR_INVALID_ARGUMENT', `priority must be an integer, got ${r.priority}`);
    this.sampler = new ContextSampler(r.seed, this.tokens);
    this.addedAt = now;
    const hashes = promptHashes(this.tokens, blockSize, { loraName: this.loraName, cacheSalt: this.cacheSalt });
    this.seqHashes = Array.from(hashes.seq);
  }
}
