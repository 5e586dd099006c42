/**
 * A slot's connection to its publisher, over real ZMQ sockets. A message over a SUB socket's size limit makes
 * libzmq drop it with the connection and end the session for good: before the watch, that slot heard nothing
 * more from its engine. A publisher that goes away and comes back on its port is ZMQ's own reconnection,
 * which the watch only reports. Through `KvEventManager`, on the main thread and on ingestion threads: each
 * change is counted and logged, and the batch the engine published over the limit comes back by replay.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { Publisher, Subscriber } from 'zeromq';
import { ManualClock, type Logger } from '../../src/common/index.js';
import { KvEventApplier, KvEventManager } from '../../src/events/index.js';
import { watchConnection, type ConnectionChange } from '../../src/events/connection-watch.js';
import { blockHashes } from '../../src/wasm/index.js';
import { TestKvPublisher } from '../helpers/zmq-publisher.js';
import { until } from '../helpers/until.js';

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  while (cleanups.length > 0) await cleanups.pop()!();
});

/** A subscriber to a fresh publisher, its messages and its connection changes. */
async function pair(maxMessageSize: number): Promise<{
  pub: Publisher;
  sub: Subscriber;
  endpoint: string;
  got: string[];
  changes: ConnectionChange[];
}> {
  const pub = new Publisher({ linger: 0 });
  await pub.bind('tcp://127.0.0.1:*');
  const endpoint = pub.lastEndpoint!;
  const sub = new Subscriber({ linger: 0, maxMessageSize });
  const changes: ConnectionChange[] = [];
  watchConnection(sub, endpoint, (c) => changes.push(c));
  sub.connect(endpoint);
  sub.subscribe('');
  const got: string[] = [];
  void (async () => {
    for await (const [m] of sub) got.push(m!.toString());
  })().catch(() => undefined);
  cleanups.push(() => {
    sub.close();
    pub.close();
  });
  return { pub, sub, endpoint, got, changes };
}

/** Sends `text` until the subscriber has it (a PUB drops what it sends while nobody is connected). */
async function deliver(pub: Publisher, got: string[], text: string): Promise<void> {
  for (let i = 0; !got.includes(text); i++) {
    if (i > 200) throw new Error(`never delivered: ${text}`);
    await pub.send(text);
    await until(() => got.includes(text), text, 50).catch(() => undefined);
  }
}

describe('watchConnection', () => {
  it('connects again after a message over the limit ends the session, which ZMQ does not', async () => {
    const { pub, got, changes } = await pair(1024);
    await deliver(pub, got, 'before');
    expect(changes).toEqual(['connected']);
    await pub.send(Buffer.alloc(4096, 1));
    await until(() => changes.length === 2, 'the disconnection');
    expect(changes).toEqual(['connected', 'disconnected']);
    // Reconnected by the watch: what is published next arrives.
    await deliver(pub, got, 'after');
    expect(changes).toEqual(['connected', 'disconnected', 'connected']);
    expect(got.filter((m) => m.length > 100)).toEqual([]);
  });

  it('reports a publisher that goes away and returns on its port, which ZMQ reconnects to by itself', async () => {
    const { pub, endpoint, got, changes } = await pair(1024);
    await deliver(pub, got, 'first');
    pub.close();
    await until(() => changes.length === 2, 'the disconnection');
    const again = new Publisher({ linger: 0 });
    await again.bind(endpoint);
    cleanups.push(() => again.close());
    await deliver(again, got, 'second');
    expect(changes).toEqual(['connected', 'disconnected', 'connected']);
  });
});

describe('a slot whose publisher sends a message over the limit', () => {
  for (const ingestThreads of [0, 2]) {
    it(`reconnects, counts and logs it; the replay meets the same limit, so it fails and the slot starts over (ingestion threads: ${ingestThreads})`, async () => {
      const BS = 4;
      const pub = await TestKvPublisher.start({ topic: 'kv-events' });
      const lines: { level: string; msg: string; fields: Record<string, unknown> }[] = [];
      const log: Logger = {
        debug: (fields, msg) => lines.push({ level: 'debug', msg, fields }),
        info: (fields, msg) => lines.push({ level: 'info', msg, fields }),
        warn: (fields, msg) => lines.push({ level: 'warn', msg, fields }),
        error: (fields, msg) => lines.push({ level: 'error', msg, fields }),
        child: () => log,
      };
      const manager = new KvEventManager({
        applier: new KvEventApplier({ blockSize: BS }),
        clock: new ManualClock(),
        staleAfterMs: 1000,
        maxMessageBytes: 4096,
        replayTimeoutMs: 300,
        ingestThreads,
        logger: log,
      });
      cleanups.push(async () => {
        await manager.close();
        await pub.close();
        manager.indexes.dispose();
      });
      const source = { workerId: 7, dpRank: 0, endpoint: pub.endpoint, replayEndpoint: pub.replayEndpoint };
      await manager.add({ ...source, topic: 'kv-events' });
      await pub.waitForSubscribers();
      const depth = (tokens: number[]): number => {
        const m = manager.indexes.device.findMatches(blockHashes(tokens, BS));
        return m.count === 0 ? 0 : m.depths[0]!;
      };
      const doc = (first: number, blocks: number): number[] => Array.from({ length: blocks * BS }, (_, i) => first + i);
      const stored = (tokens: number[], tag: bigint) => ({
        type: 'stored' as const,
        blockHashes: Array.from({ length: tokens.length / BS }, (_, i) => tag + BigInt(i)),
        parent: null,
        tokens,
        blockSize: BS,
      });
      const small = doc(1, 2);
      await pub.publish([stored(small, 1000n)]);
      await until(() => depth(small) === 2, 'the first batch');
      // 600 blocks of 4 tokens: past 4 KiB.
      const large = doc(10_000, 600);
      await pub.publish([stored(large, 1n << 40n)]);
      await until(() => manager.counters.snapshot().connections.disconnected === 1, 'the disconnection', 10_000);
      // The watch connects again; the next batch reveals the gap, and its replay's answer holds the large batch, over
      // the same limit (a replay answer is bounded as live messages are): the replay fails and the slot is cleared,
      // then follows live batches.
      const next = doc(50_000, 3);
      for (let i = 0; depth(next) !== 3; i++) {
        if (i > 100) throw new Error('the batch after the reconnection never arrived');
        await pub.publish([stored(next, (2n << 40n) + BigInt(i) * 10n)]);
        await until(() => depth(next) === 3, 'the next batch', 100).catch(() => undefined);
      }
      const s = manager.counters.snapshot();
      expect(depth(large)).toBe(0);
      expect(depth(small)).toBe(0);
      expect(s.connections).toEqual({ connected: 2, disconnected: 1, ended: 0 });
      expect(manager.connections(7)).toEqual({ connected: 1, ranks: 1 });
      expect(s.replays.failed).toBe(1);
      expect(s.resets.replay_failed).toBe(1);
      const failed = lines.find((l) => l.level === 'warn' && l.msg.includes('KV event replay failed'));
      expect(String(failed?.fields.err)).toMatch(/reply message over 4096 bytes/);
      const warn = lines.find((l) => l.level === 'warn' && l.msg.includes('KV event publisher disconnected'));
      expect(warn?.fields).toMatchObject({ workerId: 7, dpRank: 0, endpoint: pub.endpoint });
      expect(lines.filter((l) => l.msg.includes('KV event publisher connected again'))).toHaveLength(1);
    }, 60_000);
  }
});
