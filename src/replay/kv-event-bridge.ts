/**
 * Engine KV events (the mocker core's terms) to the decoded form the router's
 * `KvEventApplier` consumes: exactly what `decodeKvEventBatch` yields for the
 * same event sent over ZMQ (device tier, group 0, no LoRA id), without the
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
        groupIdx: 0,
      };
    case 'removed':
      return { type: 'removed', tier: 'device', blockHashes: new BigUint64Array(ev.blockHashes), groupIdx: 0 };
    case 'cleared':
      return { type: 'cleared' };
  }
}
