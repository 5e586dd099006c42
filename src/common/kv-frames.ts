/**
 * The sequence frame of a ZMQ KV-event message, as vLLM and SGLang publish
 * it and kvgate's subscriber reads it: frame 1 of `[topic, seq, payload]` is
 * the batch's sequence number as 8 bytes big-endian. The mocker writes it,
 * events reads it; both take the constant and the encoder from here.
 */

/** `0xFFFFFFFFFFFFFFFF` (-1 as a signed BE i64): the replay end marker in the sequence frame. */
export const REPLAY_END_SEQ = (1n << 64n) - 1n;

/** Encodes a sequence number as the 8-byte big-endian frame. */
export function encodeSeq(seq: bigint | number): Buffer {
  const b = Buffer.allocUnsafe(8);
  b.writeBigUInt64BE(BigInt.asUintN(64, BigInt(seq)));
  return b;
}
