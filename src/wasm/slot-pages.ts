/** A slot's blocks copied out of the module a page at a time (a replica's snapshot, or another index's import). */
import type { WasmModule } from './instance.js';

/** (engine hash, sequence hash) pairs per WASM call of a slot's export or import: the I/O region stays small. */
export const EXPORT_PAGE = 65_536;

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
