/**
 * Overlap of a hybrid model (several KV-cache groups): lowers each candidate's
 * device overlap to the prefix every group can serve (the rule of
 * `core/kv-groups.ts`). One-group models never come here.
 *
 * Cost: a group's block is looked up once per request (one `findMatches` of
 * that block, for every slot at once), and only the blocks a rule reads: for
 * a sliding window usually the window before the full-attention depth, for
 * Mamba the blocks from that depth back to the last saved state.
 */
import type { PrefixIndex } from '../../wasm/index.js';
import { hybridHitBlocks, type BlockPresence, type KvCacheGroups, type KvGroupSpec } from '../kv-groups.js';
import type { SlotTable } from './slots.js';

/** Which scheduler slots hold block `i` of the request in one group, looked up once per block. */
class GroupPresence {
  readonly #cache = new Map<number, Set<number>>();

  constructor(
    readonly spec: KvGroupSpec,
    readonly index: PrefixIndex,
    readonly table: SlotTable,
    readonly seq: BigUint64Array,
  ) {}

  holders(i: number): Set<number> {
    let set = this.#cache.get(i);
    if (set === undefined) {
      set = new Set();
      const m = this.index.findMatches(this.seq.subarray(i, i + 1), true);
      for (let k = 0; k < m.count; k++) {
        const w = this.index.slotWorker(m.slots[k]!);
        const s = w === undefined ? undefined : this.table.slotOf(w);
        if (s !== undefined) set.add(s);
      }
      this.#cache.set(i, set);
    }
    return set;
  }
}

/**
 * Rewrites `dev[s]` for the eligible slots `[0, n)`: with a full-attention primary group its leading depth
 * bounds the hit (the other groups can only shorten it); otherwise every prompt block is a candidate.
 */
export function clampToGroups(
  groups: KvCacheGroups,
  primary: PrefixIndex,
  table: SlotTable,
  seq: BigUint64Array,
  n: number,
  blockSize: number,
): void {
  const primarySpec = groups.primarySpec();
  const views: GroupPresence[] = [];
  if (primarySpec.kind !== 'full') views.push(new GroupPresence(primarySpec, primary, table, seq));
  for (const g of groups.others()) views.push(new GroupPresence(g.spec, g.index, table, seq));
  const { eligible, dev } = table.scratch;
  for (let k = 0; k < n; k++) {
    const s = eligible[k]!;
    const limit = primarySpec.kind === 'full' ? dev[s]! : seq.length;
    if (limit === 0) continue;
    const rules = views.map((v) => ({ spec: v.spec, held: ((i: number) => v.holders(i).has(s)) as BlockPresence }));
    dev[s] = hybridHitBlocks(rules, blockSize, limit);
  }
}
