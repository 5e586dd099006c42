/**
 * Off-heap memory left as the allocator gave it, for buffers whose every byte is written before it is read
 * (shared slabs that views are carved from on the routing decision's path). A zeroed `ArrayBuffer` of the same
 * size costs its zeroing up front: for a 64 KiB slab about three times the allocation itself, paid by the one
 * decision that happens to need a new slab.
 *
 * Contract: the caller never reads a byte it has not written; nothing from the buffer reaches a client or a
 * file unwritten.
 */
import { Buffer } from 'node:buffer';

/** `bytes` of off-heap memory, not zeroed, in an `ArrayBuffer` of its own (never a pooled one). */
export function unzeroedArrayBuffer(bytes: number): ArrayBuffer {
  return Buffer.allocUnsafeSlow(bytes).buffer as ArrayBuffer;
}
