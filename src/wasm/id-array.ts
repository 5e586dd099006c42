/**
 * A JSON array of token ids read from its UTF-8 bytes straight into a
 * Uint32Array, in the module: what a completion's prompt of 100k ids is,
 * ~800 KB of digits that `JSON.parse` turns into an array of numbers only for
 * the array to be copied into a typed array after.
 *
 * Only the plain form is read: integers of decimal digits without sign,
 * fraction or exponent (a lone `0`, no leading zero), from 0 to 2^32 - 1,
 * separated by commas with JSON white space around them. For anything else
 * (`1.0`, `1e3`, `-1`, a string, a nested array, an empty array, a value
 * out of range, malformed JSON) the reader answers undefined and the caller
 * parses the JSON as JSON, so what the reader accepts it reads exactly as
 * `JSON.parse` would, and it decides nothing else.
 *
 * One call: the bytes from the `[` to the body's end are copied into the
 * module's I/O region with zero bytes after them (assembly/json_ids.ts's
 * layout), read there, and the ids copied out: 0.5x to 0.75x the time of
 * the JavaScript reader it replaced, copies included
 * (bench/wasm/id-array.bench.ts).
 */
import { wasm } from './instance.js';

/** Zero bytes after the array's bytes: the module reads eight bytes at a time (assembly/json_ids.ts). */
const PADDING = 8;

/**
 * The ids of the JSON array whose `[` is at `start` in `bytes`, and the index after its `]`; undefined when it is
 * not a non-empty array of plain integers in range (module comment).
 */
export function jsonIdArray(bytes: Uint8Array, start: number): { ids: Uint32Array; end: number } | undefined {
  if (bytes[start] !== 0x5b) return undefined;
  const m = wasm();
  const len = bytes.length - start;
  // The bytes, eight zero bytes, then room for an id a digit and its separator, 4-byte aligned.
  const idsAt = (len + PADDING + 3) & ~3;
  const io = m.reserve(idsAt + (((len + 1) >> 1) << 2));
  const { u8, u32 } = m.views();
  u8.set(bytes.subarray(start), io);
  u8.fill(0, io + len, io + len + PADDING);
  const n = m.exports.readIdArray(io, len, io + idsAt);
  if (n < 0) return undefined;
  const from = (io + idsAt) >>> 2;
  return { ids: u32.slice(from, from + n), end: start + m.exports.idArrayEnd() };
}
