/**
 * SGLang's bootstrap room for disaggregated serving. A decode engine finds the
 * prefill data-parallel rank as `room % prefill_dp_size`, and rooms are
 * 63-bit (SGLang's contract), so the room must encode the rank without
 * overflowing: with rank and size known, `room = q * size + rank` where
 * `q = r mod (max_q + 1)` and `max_q = (i64::MAX - rank) / size`. Deterministic
 * in `r`: the caller supplies the randomness.
 */
import { KvgateError } from '../../errors/index.js';

export const I64_MAX = (1n << 63n) - 1n;

/**
 * @param dpRank the prefill rank chosen (undefined = unknown)
 * @param dpSize the prefill worker's data-parallel size (undefined or 0 = unknown)
 * @param r a random value in [0, i64::MAX]
 * @returns a room with `room % dpSize == dpRank` (when both are known) and `room <= i64::MAX`
 */
export function computeBootstrapRoom(dpRank: number | undefined, dpSize: number | undefined, r: bigint): bigint {
  if (r < 0n || r > I64_MAX)
    throw new KvgateError('KVG_ERR_INVALID_ARGUMENT', `bootstrap room seed must be in [0, i64::MAX], got ${r}`);
  if (dpRank === undefined || dpSize === undefined || dpSize === 0) return r;
  if (!Number.isInteger(dpSize) || dpSize < 0 || !Number.isInteger(dpRank) || dpRank < 0 || dpRank >= dpSize) {
    throw new KvgateError('KVG_ERR_INVALID_ARGUMENT', `dp rank ${dpRank} is not in [0, ${dpSize})`);
  }
  const size = BigInt(dpSize);
  const rank = BigInt(dpRank);
  const maxQ = (I64_MAX - rank) / size;
  const q = r % (maxQ + 1n);
  return q * size + rank;
}

/** A uniform random value in [0, i64::MAX] from a [0, 1) source (two 32-bit draws). */
export function randomRoomSeed(rng: () => number): bigint {
  const hi = BigInt(Math.floor(rng() * 2 ** 31));
  const lo = BigInt(Math.floor(rng() * 2 ** 32));
  return (hi << 32n) | lo;
}
