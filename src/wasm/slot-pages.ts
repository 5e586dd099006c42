/**
 * A slot's blocks across the boundary: copied out of the module or into it a page at a time (a replica's snapshot,
 * or another index's import), and which of some engine hashes it holds.
 */
import type { WasmModule } from './instance.js';

/** (engine hash, sequence hash) pairs per WASM call of a slot's export or import: the I/O region stays small. */
const EXPORT_PAGE = 65_536;

/** Every block slot `slot` of index `ix` holds (`blocks` of them), as interleaved (engine hash, sequence hash) pairs. */
export function exportSlotPages(m: WasmModule, ix: number, slot: number, blocks: number): BigUint64Array {
  const out = new BigUint64Array(blocks * 2);
  let from = 0;
  let filled = 0;
  while (filled < out.length) {
    const io = m.reserve(EXPORT_PAGE * 16 + 8);
    const n = m.exports.idxExportSlot(ix, slot, from, Math.min(EXPORT_PAGE, (out.length - filled) / 2), io + 8, io);
    const v = m.views();
    out.set(v.u64.subarray((io + 8) >>> 3, ((io + 8) >>> 3) + n * 2), filled);
    filled += n * 2;
    from = v.u32[io >>> 2]!;
    if (n === 0) break;
  }
  return filled === out.length ? out : out.slice(0, filled);
}

/** Adds interleaved (engine hash, sequence hash) pairs to slot `slot` of index `ix`; returns the blocks new to it. */
export function importSlotPages(m: WasmModule, ix: number, slot: number, pairs: BigUint64Array): number {
  let added = 0;
  for (let at = 0; at < pairs.length; at += EXPORT_PAGE * 2) {
    const page = pairs.subarray(at, Math.min(pairs.length, at + EXPORT_PAGE * 2));
    const io = m.reserve(page.length * 8);
    m.views().u64.set(page, io >>> 3);
    added += m.exports.idxImportSlot(ix, slot, page.length / 2, io);
  }
  return added;
}

/**
 * Sets `held[i]` to 1 for each of `engineHashes` slot `slot` of index `ix` holds, and leaves the other bytes as they
 * are (the indexes of a slot's storage tiers mark one array in turn). Returns how many it holds.
 */
export function markHeldBlocks(
  m: WasmModule,
  ix: number,
  slot: number,
  engineHashes: BigUint64Array,
  held: Uint8Array,
): number {
  const n = engineHashes.length;
  const io = m.reserve(n * 9);
  m.views().u64.set(engineHashes, io >>> 3);
  const count = m.exports.idxHolds(ix, slot, n, io, io + n * 8);
  if (count === 0) return 0;
  const u8 = m.views().u8;
  for (let i = 0, at = io + n * 8; i < n; i++) if (u8[at + i] !== 0) held[i] = 1;
  return count;
}
