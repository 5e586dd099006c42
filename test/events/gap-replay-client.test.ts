import { afterEach, describe, expect, it } from 'vitest';
import { Router } from 'zeromq';
import { ZmqGapReplayClient, encodeSeq, REPLAY_END_SEQ } from '../../src/events/index.js';

const EMPTY = Buffer.alloc(0);
const cleanups: (() => void)[] = [];
afterEach(() => {
  while (cleanups.length > 0) cleanups.pop()!();
});

/** A ROUTER that answers each request with the scripted replies. */
async function scriptedRouter(reply: (from: bigint) => Buffer[][]): Promise<{ endpoint: string; requests: bigint[] }> {
  const router = new Router({ linger: 0 });
  await router.bind('tcp://127.0.0.1:*');
  const requests: bigint[] = [];
  const loop = (async () => {
    try {
      for await (const [id, , start] of router) {
        const from = start!.readBigUInt64BE(0);
        requests.push(from);
        for (const frames of reply(from)) await router.send([id!, ...frames]);
      }
    } catch {
      // closed
    }
  })();
  cleanups.push(() => {
    router.close();
    void loop;
  });
  return { endpoint: router.lastEndpoint!, requests };
}

describe('ZmqGapReplayClient', () => {
  it('collects replies up to the end marker and reports malformed ones', async () => {
    const { endpoint, requests } = await scriptedRouter((from) => [
      [EMPTY, encodeSeq(from), Buffer.from([0x90])],
      [EMPTY, Buffer.from([1, 2]), Buffer.from([0x90])],
      [EMPTY, encodeSeq(from + 1n)],
      [EMPTY, encodeSeq(from + 1n), Buffer.from([0x91, 0x01])],
      [EMPTY, encodeSeq(REPLAY_END_SEQ), EMPTY],
    ]);
    const client = new ZmqGapReplayClient(endpoint, { timeoutMs: 2000 });
    cleanups.push(() => client.close());
    const r = await client.replay(41n);
    expect(requests).toEqual([41n]);
    expect(r.batches.map((b) => b.seq)).toEqual([41n, 42n]);
    expect([...r.batches[1]!.payload]).toEqual([0x91, 0x01]);
    expect(r.errors.map((e) => e.kind)).toEqual(['bad_sequence', 'frame_count']);
    // Serialised requests on one socket.
    const [a, b] = await Promise.all([client.replay(1n), client.replay(5n)]);
    expect(a.batches.map((x) => x.seq)).toEqual([1n, 2n]);
    expect(b.batches.map((x) => x.seq)).toEqual([5n, 6n]);
  });

  it('times out with KVG_ERR_KV_EVENT_REPLAY, then works again on a fresh socket', async () => {
    let answer = false;
    const { endpoint } = await scriptedRouter((from) =>
      answer
        ? [
            [EMPTY, encodeSeq(from), Buffer.from([0x90])],
            [EMPTY, encodeSeq(REPLAY_END_SEQ), EMPTY],
          ]
        : [],
    );
    const client = new ZmqGapReplayClient(endpoint, { timeoutMs: 100 });
    cleanups.push(() => client.close());
    await expect(client.replay(3n)).rejects.toMatchObject({ code: 'KVG_ERR_KV_EVENT_REPLAY', retryable: true });
    answer = true;
    expect((await client.replay(4n)).batches.map((x) => x.seq)).toEqual([4n]);
  });

  it('close() rejects a request in flight', async () => {
    const { endpoint } = await scriptedRouter(() => []);
    const client = new ZmqGapReplayClient(endpoint, { timeoutMs: 5000 });
    const pending = client.replay(0n);
    await new Promise((r) => setImmediate(r));
    client.close();
    await expect(pending).rejects.toMatchObject({ code: 'KVG_ERR_KV_EVENT_REPLAY' });
    await expect(client.replay(0n)).rejects.toMatchObject({ code: 'KVG_ERR_KV_EVENT_REPLAY' });
  });

  it('refuses a reply message over maxMessageBytes (the request fails, the next one works)', async () => {
    let big = true;
    const { endpoint } = await scriptedRouter((from) => [
      [EMPTY, encodeSeq(from), Buffer.alloc(big ? 128 * 1024 : 1, 0x90)],
      [EMPTY, encodeSeq(REPLAY_END_SEQ), EMPTY],
    ]);
    const client = new ZmqGapReplayClient(endpoint, { timeoutMs: 300, maxMessageBytes: 64 * 1024 });
    cleanups.push(() => client.close());
    await expect(client.replay(7n)).rejects.toMatchObject({
      code: 'KVG_ERR_KV_EVENT_REPLAY',
      message: expect.stringMatching(/reply message over 65536 bytes/),
    });
    big = false;
    expect((await client.replay(8n)).batches.map((x) => x.seq)).toEqual([8n]);
  });

  it('fails an answer whose payloads pass maxReplyBytes in all, before holding the rest', async () => {
    const { endpoint } = await scriptedRouter((from) => [
      ...Array.from({ length: 50 }, (_, i) => [EMPTY, encodeSeq(from + BigInt(i)), Buffer.alloc(1024, 0x90)]),
      [EMPTY, encodeSeq(REPLAY_END_SEQ), EMPTY],
    ]);
    const client = new ZmqGapReplayClient(endpoint, { timeoutMs: 2000, maxReplyBytes: 10 * 1024 });
    cleanups.push(() => client.close());
    await expect(client.replay(0n)).rejects.toMatchObject({
      code: 'KVG_ERR_KV_EVENT_REPLAY',
      message: expect.stringMatching(/answer over 10240 bytes/),
    });
    // Exactly at the bound is taken.
    const exact = new ZmqGapReplayClient(endpoint, { timeoutMs: 2000, maxReplyBytes: 50 * 1024 });
    cleanups.push(() => exact.close());
    expect((await exact.replay(0n)).batches).toHaveLength(50);
  });
});
