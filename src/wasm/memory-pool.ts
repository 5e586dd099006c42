/**
 * One memory budget over several prefix indexes (`PrefixIndex.shareMemoryBudget`): a pool's router index and
 * the indexes beside it that the same engines feed (a hybrid model's other KV-cache groups, the host, disk and
 * external storage tiers) hold their bytes against one budget, `router_index_memory_budget_mib`, which therefore
 * bounds the model's whole index and not its primary part alone: an engine publishing many blocks in a
 * sliding-window group or offloading many to host memory cannot grow memory past it.
 *
 * Why one budget shared by need rather than a fixed share per index: the indexes beside the primary usually
 * hold far fewer entries (a sliding-window group keeps a window of each request's blocks, a Mamba group one
 * block; many engines offload nothing), so an even split would cut the primary, which every routing decision
 * reads, to a fraction of the budget for memory the others never use. Instead, when an applied event takes the
 * indexes together past the budget, they are evicted down to 90 % of it max-min fairly (water-filling): the
 * largest are trimmed to a common level, each by its own least recently matched blocks, and an index under that
 * level keeps all it holds. So a small group is never evicted to make room for the primary, and a group grown
 * as large as the primary (a flood of its events) is trimmed as the primary is: neither can take the other's
 * share below an even split of the budget.
 */
import { IndexMemoryError } from '../errors/index.js';

/** One eviction under the memory budget (see `PrefixIndex.setMemoryBudget`). */
export interface EvictionReport {
  /** (block, slot) entries evicted by this eviction, from every index sharing the budget. */
  readonly entries: number;
  /** Bytes the indexes sharing the budget hold afterwards, together. */
  readonly bytesAfter: number;
  /** True for the first eviction of an episode (they had been under 3/4 of the budget, or never evicted). */
  readonly episodeStart: boolean;
}

/** One index as its pool sees it: `PrefixIndex` makes it, over its own private state. */
export interface PoolMember {
  /** Bytes the index holds (0 while a discarded index has no memory). */
  bytes(): number;
  /** Evicts its least recently matched blocks until it holds at most `target` bytes; entries evicted. */
  evictTo(target: number): number;
}

/** Passes of eviction at most per enforcement: a member that could not reach its level is trimmed again. */
const MAX_PASSES = 4;

/**
 * The largest level with the sizes, each capped at it, summing to at most `target` (called only when they sum
 * to more): every size above it is to be brought down to it. (Also src/events' hash books' trim.)
 */
export function waterLevel(sizes: readonly number[], target: number): number {
  const desc = [...sizes].sort((a, b) => b - a);
  let rest = desc.reduce((a, b) => a + b, 0);
  for (let k = 1; k <= desc.length; k++) {
    rest -= desc[k - 1]!;
    // The k largest at `level`, the others as they are.
    const level = (target - rest) / k;
    if (level >= (desc[k] ?? 0)) return Math.max(0, Math.floor(level));
  }
  return 0;
}

/** The indexes under one budget (one index alone until another shares it), and the budget's episode. */
export class IndexMemoryPool {
  readonly #members = new Set<PoolMember>();
  #budget = 0;
  #onEvict: ((report: EvictionReport) => void) | undefined;
  #inEpisode = false;

  /** The budget in bytes; 0: none. */
  get budget(): number {
    return this.#budget;
  }

  /** Whether the last eviction's episode goes on (the indexes have not been under 3/4 of the budget since). */
  get inEpisode(): boolean {
    return this.#inEpisode;
  }

  setBudget(bytes: number, onEvict: ((report: EvictionReport) => void) | undefined): void {
    this.#budget = bytes;
    this.#onEvict = onEvict;
  }

  join(member: PoolMember): void {
    this.#members.add(member);
  }

  leave(member: PoolMember): void {
    this.#members.delete(member);
  }

  /** Bytes every member holds, together. */
  held(): number {
    let bytes = 0;
    for (const m of this.#members) bytes += m.bytes();
    return bytes;
  }

  /** Bytes the members but `member` hold (0 without another: the common case costs no call). */
  othersHeld(member: PoolMember): number {
    return this.#members.size === 1 ? 0 : this.held() - member.bytes();
  }

  /**
   * After `trigger` applied an event: over the budget, evicts the members max-min fairly down to 90 % of it and
   * reports it. A member discarded by a trap in its eviction holds nothing afterwards (its discard listeners
   * rebuild it); the error is thrown once the others are evicted only when it is `trigger`'s, whose caller's
   * event it failed, as one index's own eviction always did.
   */
  enforce(trigger: PoolMember): void {
    if (this.#budget === 0) return;
    let held = this.held();
    if (held <= this.#budget) {
      if (held < this.#budget * 0.75) this.#inEpisode = false;
      return;
    }
    const target = Math.floor(this.#budget * 0.9);
    let entries = 0;
    let failed: IndexMemoryError | undefined;
    for (let pass = 0; pass < MAX_PASSES && held > target; pass++) {
      const members = [...this.#members];
      const sizes = members.map((m) => m.bytes());
      const level = waterLevel(sizes, target);
      let evicted = 0;
      for (const [i, m] of members.entries()) {
        if (sizes[i]! <= level) continue;
        try {
          evicted += m.evictTo(level);
        } catch (err) {
          if (!(err instanceof IndexMemoryError)) throw err;
          if (m === trigger) failed = err;
        }
      }
      entries += evicted;
      held = this.held();
      if (evicted === 0) break;
    }
    const episodeStart = !this.#inEpisode;
    this.#inEpisode = true;
    this.#onEvict?.({ entries, bytesAfter: held, episodeStart });
    if (failed !== undefined) throw failed;
  }
}
