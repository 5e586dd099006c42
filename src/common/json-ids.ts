/**
 * A JSON array of token ids read from its UTF-8 bytes straight into a
 * Uint32Array: what a completion's prompt of 100k ids is, ~700 KB of digits
 * that `JSON.parse` turns into an array of numbers (~60 ns an id on the
 * 2-core machine) only for the array to be copied into a typed array after.
 *
 * Only the plain form is read: integers of decimal digits without sign,
 * fraction or exponent (a lone `0`, no leading zero), from 0 to 2^32 - 1,
 * separated by commas with JSON white space around them. For anything else
 * (`1.0`, `1e3`, `-1`, a string, a nested array, an empty array, a value
 * out of range, malformed JSON) the reader answers undefined and the caller
 * parses the JSON as JSON, so what the reader accepts it reads exactly as
 * `JSON.parse` would, and it decides nothing else.
 */

const isSpace = (c: number): boolean => c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09;

/**
 * The ids of the JSON array whose `[` is at `start` in `bytes`, and the index after its `]`; undefined when it is
 * not a non-empty array of plain integers in range (module comment).
 */
export function jsonIdArray(bytes: Uint8Array, start: number): { ids: Uint32Array; end: number } | undefined {
  // A plain Uint8Array view: element reads stay monomorphic whatever subclass (Buffer) the caller holds; every read
  // is within bounds (an out-of-bounds read would cost the loop its fast path).
  const b = new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const len = b.length;
  if (b[start] !== 0x5b) return undefined;
  // Ids of a large vocabulary take five to seven bytes with their comma; grown by doubling past that guess.
  let ids = new Uint32Array(Math.min((len - start) >> 2, 1 << 20) + 16);
  let n = 0;
  let i = start + 1;
  while (i < len && isSpace(b[i]!)) i++;
  for (;;) {
    if (i >= len) return undefined;
    let v = b[i]! - 0x30;
    if (v < 0 || v > 9) return undefined;
    i++;
    if (v === 0) {
      // No leading zero.
      if (i < len && b[i]! >= 0x30 && b[i]! <= 0x39) return undefined;
    } else {
      while (i < len) {
        const d = b[i]! - 0x30;
        if (d < 0 || d > 9) break;
        v = v * 10 + d;
        i++;
      }
      // Exact up to 15 digits; a longer number is past the range whatever its rounding.
      if (v > 0xffffffff) return undefined;
    }
    if (n === ids.length) {
      const grown = new Uint32Array(ids.length * 2);
      grown.set(ids);
      ids = grown;
    }
    ids[n++] = v;
    while (i < len && isSpace(b[i]!)) i++;
    if (i >= len) return undefined;
    const c = b[i]!;
    if (c === 0x5d) return { ids: ids.slice(0, n), end: i + 1 };
    if (c !== 0x2c) return undefined;
    i++;
    while (i < len && isSpace(b[i]!)) i++;
  }
}
