// A JSON array of token ids read from its UTF-8 bytes: a completion's prompt of 100k ids is ~800 KB of digits.
//
// The grammar read (src/wasm/id-array.ts states the contract): `[`, then one or more integers of decimal digits
// without sign, fraction or exponent (a lone `0`, no leading zero) from 0 to 2^32 - 1, separated by `,`, with JSON
// white space around each, then `]`. Anything else is refused (-1), and the host parses the JSON as JSON.
//
// Layout contract: the host copies the bytes from the `[` on to `src` and writes eight zero bytes from `src + len`.
// A zero byte is neither a digit, white space, `,` nor `]`, so every run stops at the first of them or before, and
// an 8-byte load at any byte read stays within the padding; `dst` has room for (len + 1) / 2 ids (an id takes a
// digit and the byte after it).
//
// An id's digits are read eight bytes at a time (SWAR): the first byte that is not a digit is found from a mask of
// the word, and the digits before it are summed by three multiplications, so the number of digits costs no branch
// (ids of 5 or 6 digits in random order cost one mispredicted branch each in a loop over their bytes).

const LOW_NIBBLES: u64 = 0x0f0f0f0f0f0f0f0f;
const HIGH_NIBBLES: u64 = 0xf0f0f0f0f0f0f0f0;
const ZEROS: u64 = 0x3030303030303030;

/** The number up to eight decimal digits make, one a byte (0 to 9), the most significant in the lowest byte. */
// @ts-ignore: decorator
@inline function eightDigits(v: u64): u32 {
  v = (v * 2561) >> 8;
  v = ((v & 0x00ff00ff00ff00ff) * 6553601) >> 16;
  return <u32>(((v & 0x0000ffff0000ffff) * 42949672960001) >> 32);
}

// @ts-ignore: decorator
@inline function isSpace(c: u32): bool {
  return c == 0x20 || c == 0x0a || c == 0x0d || c == 0x09;
}

/** Where the last array read ended: the byte offset after its `]`, from `src`. */
let lastEnd: u32 = 0;

export function idArrayEnd(): u32 {
  return lastEnd;
}

/** Reads the array at `src` (module comment) into `dst`; returns the ids read, or -1 when the bytes are refused. */
export function readIdArray(src: usize, len: u32, dst: usize): i32 {
  if (len == 0 || load<u8>(src) != 0x5b) return -1;
  let p = src + 1;
  let out = dst;
  while (true) {
    while (isSpace(<u32>load<u8>(p))) p++;
    const word = load<u64>(p);
    const d = word ^ ZEROS;
    // A byte is a digit when both nibbles of (byte ^ 0x30) say 0 to 9: no high nibble, and a low one that adding 6
    // does not carry out of (added to the low nibbles alone, so no carry crosses into the next byte).
    const other = (d & HIGH_NIBBLES) | (((d & LOW_NIBBLES) + 0x0606060606060606) & HIGH_NIBBLES);
    let v: u32;
    if (other != 0) {
      const digits = <u32>ctz(other) >> 3;
      if (digits == 0) return -1;
      // No leading zero.
      if (digits > 1 && (word & 0xff) == 0x30) return -1;
      // The digits moved to the top bytes: the bytes after them leave the word, zeros come in as leading digits.
      v = eightDigits((d & LOW_NIBBLES) << (<u64>(8 - digits) << 3));
      p += digits;
    } else {
      // Eight digits or more: the ninth and tenth one at a time, the tenth checked against 2^32 - 1.
      if ((word & 0xff) == 0x30) return -1;
      v = eightDigits(d);
      p += 8;
      const ninth = <u32>load<u8>(p) - 0x30;
      if (ninth <= 9) {
        v = v * 10 + ninth;
        const tenth = <u32>load<u8>(++p) - 0x30;
        if (tenth <= 9) {
          if (v > 429496729 || (v == 429496729 && tenth > 5)) return -1;
          v = v * 10 + tenth;
          // An eleventh digit.
          if (<u32>load<u8>(++p) - 0x30 <= 9) return -1;
        }
      }
    }
    store<u32>(out, v);
    out += 4;
    let c = <u32>load<u8>(p);
    if (c == 0x2c) {
      p++;
      continue;
    }
    while (isSpace(c)) c = <u32>load<u8>(++p);
    if (c == 0x2c) {
      p++;
      continue;
    }
    if (c != 0x5d) return -1;
    lastEnd = <u32>(p + 1 - src);
    return <i32>((out - dst) >> 2);
  }
}
