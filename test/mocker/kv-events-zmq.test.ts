/**
 * KV events over real ZMQ sockets: exact byte layouts of engine-wire-formats.md
 * 1.5 as a subscriber sees them, eviction, replay of missed batches, SGLang
 * flavour with data-parallel ranks, and the event faults.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { decode } from '@msgpack/msgpack';
import { promptHashes } from '../../src/wasm/index.js';
import { startMocker, type MockerHandle, type MockerInput } from '../../src/mocker/index.js';
import { engineHash, postJson, replay, subscribeEvents, type EventStream } from './helpers.js';

const SEED = 0x0123_4567_89ab_cdefn;
const open: { m: MockerHandle; s?: EventStream }[] = [];

async function mocker(input: MockerInput): Promise<MockerHandle> {
  const m = await startMocker({ engineHashSeed: SEED, speedup: 100, blockSize: 4, ...input });
  open.push({ m });
  return m;
}

async function events(m: MockerHandle, rank = 0): Promise<EventStream> {
  const s = await subscribeEvents(m, rank);
  open.push({ m, s });
  return s;
}

afterEach(async () => {
  for (const { m, s } of open.splice(0)) {
    s?.close();
    await m.close();
  }
});

const s = (text: string): string => (0xa0 + text.length).toString(16) + Buffer.from(text, 'ascii').toString('hex');
const u64 = (h: bigint): string => {
  expect(h > 0xffffffffn).toBe(true); // large hashes use the uint64 form (cf), as in the spec example
  return `cf${h.toString(16).padStart(16, '0')}`;
};
const complete = (m: MockerHandle, prompt: number[], extra: Record<string, unknown> = {}) =>
  postJson(`${m.url}/v1/completions`, { prompt, max_tokens: 1, ...extra });

describe('KV events on the wire (ZMQ PUB)', () => {
  it("legacy array encoding: the exact bytes of section 1.5 (a), with the engine's opaque hashes", async () => {
    const m = await mocker({ kvEventsEncoding: 'array', kvEventsTopic: 'kv-events' });
    const stream = await events(m);
    m.restartEventSequence();
    const prompt = [1, 2, 3, 4, 5, 6, 7, 8];
    expect((await complete(m, prompt)).status).toBe(200);
    const msg = await stream.next();
    expect(msg.topic).toBe('kv-events');
    expect(msg.seq).toBe(0n);
    const [h0, h1] = [...promptHashes(prompt, 4).seq].map((h) => engineHash(h, SEED));
    const hex = msg.payload.toString('hex');
    const ts = msg.payload.readDoubleBE(2);
    expect(Math.abs(ts - Date.now() / 1000)).toBeLessThan(60);
    expect(hex).toBe(
      [
        '93',
        'cb',
        msg.payload.subarray(2, 10).toString('hex'),
        '91',
        '9c',
        s('BlockStored'),
        '92',
        u64(h0!),
        u64(h1!),
        'c0',
        '98 0102030405060708',
        '04',
        'c0',
        s('GPU'),
        'c0c0c0c0c0',
        '00',
      ]
        .join('')
        .replace(/\s/g, ''),
    );
  });

  it('map encoding: the exact bytes of section 1.5 (b)', async () => {
    const m = await mocker({ kvEventsEncoding: 'map' });
    const stream = await events(m);
    m.restartEventSequence();
    const prompt = [9, 10, 11, 12];
    expect((await complete(m, [...prompt, 13])).status).toBe(200);
    const msg = await stream.next();
    expect(msg.seq).toBe(0n);
    const h = engineHash(promptHashes(prompt, 4).seq[0]!, SEED);
    expect(msg.payload.toString('hex')).toBe(
      [
        '93cb',
        msg.payload.subarray(2, 10).toString('hex'),
        '91',
        '8a',
        s('type'),
        s('BlockStored'),
        s('block_hashes'),
        '91',
        u64(h),
        'b1',
        Buffer.from('parent_block_hash').toString('hex'),
        'c0',
        s('token_ids'),
        '94090a0b0c',
        s('block_size'),
        '04',
        s('lora_id'),
        'c0',
        s('medium'),
        s('GPU'),
        s('lora_name'),
        'c0',
        s('group_idx'),
        '00',
        'b2',
        Buffer.from('kv_cache_spec_kind').toString('hex'),
        s('full_attention'),
        '00',
      ].join(''),
    );
    // And the same with @msgpack/msgpack, as a router would decode it.
    expect(decode(msg.payload, { useBigInt64: true })).toEqual([
      msg.batch[0],
      [
        {
          type: 'BlockStored',
          block_hashes: [h],
          parent_block_hash: null,
          token_ids: prompt,
          block_size: 4,
          lora_id: null,
          medium: 'GPU',
          lora_name: null,
          group_idx: 0,
          kv_cache_spec_kind: 'full_attention',
        },
      ],
      0,
    ]);
  });

  it('a repeated prompt reports the shared full-block prefix; eviction under a small cache emits BlockRemoved and stops the hits', async () => {
    const m = await mocker({ numGpuBlocks: 8, kvEventsEncoding: 'map' });
    const stream = await events(m);
    const a = Array.from({ length: 21 }, (_, i) => 1000 + i);
    const first = await complete(m, a);
    expect(first.json.usage.prompt_tokens_details.cached_tokens).toBe(0);
    const stored = await stream.next();
    const aHashes = [...promptHashes(a, 4).seq].map((h) => engineHash(h, SEED));
    expect(stored.batch[1][0].block_hashes).toEqual(aHashes);
    const again = await complete(m, a);
    expect(again.json.usage.prompt_tokens_details.cached_tokens).toBe(20);
    expect(again.json.usage.prompt_tokens).toBe(21);

    // 32 new tokens need all 8 blocks: every cached block of `a` is evicted, tail first.
    const b = Array.from({ length: 32 }, (_, i) => 2000 + i);
    expect((await complete(m, b)).status).toBe(200);
    // (The warm-up probe's block, released earlier, goes first: least recently used.)
    const removed: bigint[] = [];
    while (removed.length < 5) {
      const msg = await stream.next();
      for (const ev of msg.batch[1])
        if (ev.type === 'BlockRemoved') removed.push(...ev.block_hashes.filter((h: bigint) => aHashes.includes(h)));
    }
    expect(removed).toEqual([...aHashes].reverse());
    const third = await complete(m, a);
    expect(third.json.usage.prompt_tokens_details.cached_tokens).toBe(0);
  });

  it('replay returns the batches a subscriber missed, then the end marker', async () => {
    const m = await mocker({ kvEventsReplayPort: 0, kvEventsEncoding: 'array' });
    const stream = await events(m);
    m.restartEventSequence();
    m.setFaults({ dropNextEventBatches: 1 });
    await complete(m, [1, 2, 3, 4, 5]);
    await complete(m, [6, 7, 8, 9, 10]);
    const seen = await stream.next();
    expect(seen.seq).toBe(1n); // seq 0 was lost: a gap
    const replayed = await replay(m.replayEndpoints[0]!, 0n);
    expect(replayed.map((r) => r.seq)).toEqual([0n, 1n]);
    const missed = decode(replayed[0]!.payload) as [number, unknown[][], number];
    expect(missed[1][0]!.slice(0, 5)).toEqual(['BlockStored', [expect.anything()], null, [1, 2, 3, 4], 4]);
    expect(Buffer.compare(replayed[1]!.payload, seen.payload)).toBe(0);
    expect(await replay(m.replayEndpoints[0]!, 5n)).toEqual([]);
    expect(m.stats().ranks[0]!.eventBatchesDropped).toBe(1);
  });

  it('reorders batches and restarts the sequence on demand', async () => {
    const m = await mocker({});
    const stream = await events(m);
    m.restartEventSequence();
    m.setFaults({ reorderEvents: true });
    await complete(m, [11, 12, 13, 14, 15]);
    await complete(m, [16, 17, 18, 19, 20]);
    expect([(await stream.next()).seq, (await stream.next()).seq]).toEqual([1n, 0n]);
    m.setFaults({ reorderEvents: false });
    m.restartEventSequence();
    await complete(m, [21, 22, 23, 24, 25]);
    expect((await stream.next()).seq).toBe(0n);
  });

  // issue 13 must-show 5: the garbage flood fault the events tests drive through the admin endpoint.
  it('floods garbage on demand: random seqs, AllBlocksCleared payloads, never in the replay buffer', async () => {
    const m = await mocker({ kvEventsReplayPort: 0, seed: 5 });
    const stream = await events(m);
    await complete(m, [41, 42, 43, 44, 45]);
    const real = m.stats().ranks[0]!.nextEventSeq!;
    while ((await stream.next()).seq < BigInt(real - 1));
    m.setFaults({ garbageEventFlood: 50 });
    expect(m.faults.garbageEventFlood).toBe(0); // consumed: one flood per request
    const seqs = new Set<bigint>();
    for (let i = 0; i < 50; i++) {
      const msg = await stream.next();
      expect(msg.batch[1]).toEqual([{ type: 'AllBlocksCleared' }]);
      seqs.add(msg.seq);
    }
    expect(seqs.size).toBe(50);
    expect([...seqs].filter((q) => q > 1_000_000n).length).toBeGreaterThan(45);
    await complete(m, [46, 47, 48, 49, 50]);
    expect((await stream.next()).seq).toBe(BigInt(real)); // the real sequence goes on
    const buffered = (await replay(m.replayEndpoints[0]!, 0n)).map((r) => r.seq);
    expect(buffered.every((q) => q < BigInt(m.stats().ranks[0]!.nextEventSeq!))).toBe(true);
  });

  it('AllBlocksCleared on /reset_prefix_cache', async () => {
    const m = await mocker({ kvEventsEncoding: 'array' });
    const stream = await events(m);
    const r = await postJson(`${m.url}/reset_prefix_cache`, {});
    expect(r.json).toEqual({ success: true });
    expect((await stream.next()).batch[1]).toEqual([['AllBlocksCleared']]);
  });

  it('LoRA adapters namespace the hashes and appear as lora_name', async () => {
    const m = await mocker({ loraNames: ['adapter-a'] });
    const stream = await events(m);
    const prompt = [31, 32, 33, 34, 35];
    await complete(m, prompt, { model: 'adapter-a' });
    const ev = (await stream.next()).batch[1][0];
    expect(ev.lora_name).toBe('adapter-a');
    expect(ev.block_hashes).toEqual([engineHash(promptHashes(prompt, 4, { loraName: 'adapter-a' }).seq[0]!, SEED)]);
    // The base model does not hit the adapter's blocks.
    expect((await complete(m, prompt)).json.usage.prompt_tokens_details.cached_tokens).toBe(0);
    const models = (await (await fetch(`${m.url}/v1/models`)).json()) as {
      data: { id: string; parent: string | null }[];
    };
    expect(models.data.map((d) => [d.id, d.parent])).toEqual([
      ['mock-model', null],
      ['adapter-a', 'mock-model'],
    ]);
  });

  it('SGLang flavour: per-rank publishers, attn_dp_rank, signed int64 hashes', async () => {
    const m = await mocker({ engine: 'sglang', dpSize: 2, kvEventsEncoding: 'array' });
    expect(m.kvEventsEndpoints).toHaveLength(2);
    expect(new Set(m.kvEventsPorts).size).toBe(2);
    const rank1 = await events(m, 1);
    const prompt = Array.from({ length: 9 }, (_, i) => 300 + i);
    expect((await complete(m, prompt, { data_parallel_rank: 1 })).status).toBe(200);
    const msg = await rank1.next();
    expect(msg.batch[2]).toBe(1);
    const ev = msg.batch[1][0];
    expect(ev.slice(0, 1)).toEqual(['BlockStored']);
    expect(ev).toHaveLength(7);
    // Rank 1 hashes under seed + 1 (its own "process"), sent as signed int64.
    const expected = [...promptHashes(prompt, 4).seq].map((h) => BigInt.asIntN(64, engineHash(h, SEED + 1n)));
    expect(ev[1].map((h: bigint | number) => BigInt(h))).toEqual(expected);
    expect(m.stats().ranks[1]!.promptTokens).toBeGreaterThanOrEqual(9);
    // cache_salt namespaces the chain and rides on SGLang events (8th element).
    await complete(m, prompt, { data_parallel_rank: 1, cache_salt: 'tenant-a' });
    const salted = (await rank1.next()).batch[1][0];
    expect(salted[7]).toEqual({ cache_salt: 'tenant-a' });
    expect(BigInt(salted[1][0])).toBe(
      BigInt.asIntN(64, engineHash(promptHashes(prompt, 4, { cacheSalt: 'tenant-a' }).seq[0]!, SEED + 1n)),
    );
    const info = (await (await fetch(`${m.url}/server_info`)).json()) as {
      kv_events: { ports: number[]; block_size: number; dp_size: number };
    };
    expect(info.kv_events).toMatchObject({ ports: m.kvEventsPorts, block_size: 4, dp_size: 2 });
  });
});
