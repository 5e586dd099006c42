/**
 * Engine KV events (the mocker core's terms) to the decoded form the router's
 * `KvEventApplier` consumes: exactly what `decodeKvEventBatch` yields for the
 * same event sent over ZMQ (device tier, no LoRA id; a hybrid engine's group fields), without the
 * msgpack round trip. Pinned by test/replay/kv-event-bridge.test.ts against
 * the real encoder and decoder.
 */
import type { KvCacheEvent } from '../events/index.js';
import type { KvEvent } from '../mocker/index.js';

export function toCacheEvent(ev: KvEvent): KvCacheEvent {
  switch (ev.type) {
    case 'stored':
      return {
        type: 'stored',
        tier: 'device',
        parentHash: ev.parentBlockHash,
        blockHashes: BigUint64Array.from(ev.blockHashes),
        tokenIds: new Uint32Array(ev.tokenIds),
        blockSize: ev.blockSize,
        droppedBlocks: 0,
        loraName: ev.loraName ?? undefined,
        loraId: undefined,
        cacheSalt: ev.cacheSalt ?? undefined,
        mmHashes: undefined,
        ...hybridFields(ev),
      };
    case 'removed':
      return {
        type: 'removed',
        tier: 'device',
        blockHashes: new BigUint64Array(ev.blockHashes),
        groupIdx: ev.groupIdx ?? 0,
      };
    case 'cleared':
      return { type: 'cleared' };
  }
}

/** A hybrid engine's group fields as the decoder yields them (its null blocks are the range's leading blocks). */
function hybridFields(
  ev: Extract<KvEvent, { type: 'stored' }>,
): Pick<KvCacheEvent & { type: 'stored' }, 'groupIdx' | 'specKind' | 'slidingWindow' | 'leadingNullBlocks'> {
  if (ev.groupIdx === undefined) return { groupIdx: 0 };
  const nulls = ev.tokenIds.length / ev.blockSize - ev.blockHashes.length;
  return {
    groupIdx: ev.groupIdx,
    specKind: ev.specKind,
    slidingWindow: ev.slidingWindow ?? undefined,
    ...(nulls > 0 ? { leadingNullBlocks: nulls } : {}),
  };
}
