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
 *
 * Speed (~1.5 ns a byte once optimized on the 2-core machine, bench/common/json-ids.bench.ts) comes from the shape V8's
 * optimizing compiler is given: Node 20's keeps no check across a loop's back edge, so every loop re-checks the byte
 * view's type and reloads its length and data pointer on each turn. Hence loops only where a turn is a whole id
 * (the digits of one id are read by straight-line code) or rare (white space runs), no bounds test of ours per byte
 * (the last byte that can end a run of digits or spaces is found once, from the end), digits summed in an int, and
 * the ids written into one buffer kept by the thread.
 */

/**
 * The thread's buffer for the ids being read, kept up to `KEEP_IDS` ids (4 MiB): a call allocates only the copy it
 * returns. Nothing else reads it, and a call never yields, so no two calls share it at once.
 */
let scratch = new Uint32Array(0);
const KEEP_IDS = 1 << 20;

const isDigit = (c: number): boolean => (c - 0x30) >>> 0 <= 9;
const isSpace = (c: number): boolean => c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09;

/** Room for `count` ids: the thread's buffer, replaced by a larger one (kept if not too large) when short. */
function idBuffer(count: number): Uint32Array<ArrayBuffer> {
  if (scratch.length >= count) return scratch;
  const ids = new Uint32Array(count);
  if (count <= KEEP_IDS) scratch = ids;
  return ids;
}

/**
 * The index of the last byte after `start` that is neither a digit nor white space, `start` when there is none: a
 * run of digits or spaces that begins before it ends at it or sooner, so reads that stop at such a run's end stay
 * within the bytes without testing the index. The array's `]` can be no later.
 */
function lastStop(b: Uint8Array, start: number): number {
  let i = b.length - 1;
  while (i > start && (isDigit(b[i]!) || isSpace(b[i]!))) i--;
  return i;
}

/**
 * The ids of the JSON array whose `[` is at `start` in `bytes`, and the index after its `]`; undefined when it is
 * not a non-empty array of plain integers in range (module comment).
 */
export function jsonIdArray(bytes: Uint8Array, start: number): { ids: Uint32Array; end: number } | undefined {
  // A plain Uint8Array view: element reads stay monomorphic whatever subclass (Buffer) the caller holds.
  const b = new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (b[start] !== 0x5b) return undefined;
  // Every read below is at `stop` or before it (lastStop): at a digit or space before it, the next byte exists.
  const stop = lastStop(b, start);
  if (stop === start) return undefined;
  // An id takes a digit and the `,` or `]` after it, all after `start` and up to `stop`: room enough, and the loop
  // makes no call to grow it.
  const ids = idBuffer(((stop - start) >> 1) + 1);
  let n = 0;
  let i = start + 1;
  let c = b[i]!;
  // No calls from here on, the byte tests written out: V8 inlines a call only once it has seen it made, and a call
  // it left in place (white space that the first long prompt had none of) would cost more than the test.
  while (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09) c = b[++i]!;
  for (;;) {
    let v = c - 0x30;
    if (v >>> 0 > 9) return undefined;
    // The id's other digits, straight-line (module comment): eight more stay below 2^31, a tenth is checked against
    // 2^32 - 1 (429496729 and 5). `d` is the byte after the digits less 0x30.
    let d: number;
    digits: {
      d = b[++i]! - 0x30;
      if (d >>> 0 > 9) break digits;
      // No leading zero.
      if (v === 0) return undefined;
      v = v * 10 + d;
      d = b[++i]! - 0x30;
      if (d >>> 0 > 9) break digits;
      v = v * 10 + d;
      d = b[++i]! - 0x30;
      if (d >>> 0 > 9) break digits;
      v = v * 10 + d;
      d = b[++i]! - 0x30;
      if (d >>> 0 > 9) break digits;
      v = v * 10 + d;
      d = b[++i]! - 0x30;
      if (d >>> 0 > 9) break digits;
      v = v * 10 + d;
      d = b[++i]! - 0x30;
      if (d >>> 0 > 9) break digits;
      v = v * 10 + d;
      d = b[++i]! - 0x30;
      if (d >>> 0 > 9) break digits;
      v = v * 10 + d;
      d = b[++i]! - 0x30;
      if (d >>> 0 > 9) break digits;
      v = v * 10 + d;
      d = b[++i]! - 0x30;
      if (d >>> 0 > 9) break digits;
      if (v > 429496729 || (v === 429496729 && d > 5)) return undefined;
      v = (v * 10 + d) >>> 0;
      // An eleventh digit is neither `,` nor `]`: refused below.
      d = b[++i]! - 0x30;
    }
    c = d + 0x30;
    ids[n++] = v;
    if (c <= 0x20) while (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09) c = b[++i]!;
    if (c !== 0x2c) return c === 0x5d ? { ids: ids.slice(0, n), end: i + 1 } : undefined;
    if (i === stop) return undefined;
    c = b[++i]!;
    if (c <= 0x20) {
      // `, ` (Python's json.dumps) read without a loop.
      if (c === 0x20) c = b[++i]!;
      if (c <= 0x20) while (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09) c = b[++i]!;
    }
  }
}

// Each common path run as the module loads, twice over a few hundred ids so that V8 has allocated the reader's
// feedback and its result's shape is settled: the optimizing compiler first compiles the reader in the middle of a
// thread's first long prompt, and code compiled before that prompt's end (or its white space, or a ten-digit id) had
// run would be thrown away when they do and compiled again (the first three calls on 123k ids in a fresh process,
// compiler threads included: a median of ~15 ms of CPU against ~20 without this, ~26 before this reader, on the
// 2-core machine).
const WARM_UP = Buffer.from(`[ 1,\n20 , 4294967295,${Array.from({ length: 256 }, (_, k) => k * 7).join(', ')}]`);
for (let k = 0; k < 2; k++) jsonIdArray(WARM_UP, 0);
