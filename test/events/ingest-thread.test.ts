/**
 * An ingestion thread's work (ingest-thread.ts), run here in the test's own thread over real ZMQ sockets: what
 * it reports to the main thread when a socket's receive fails for good.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { IngestThread, type IngestReport } from '../../src/events/ingest-thread.js';
import { TestKvPublisher } from '../helpers/zmq-publisher.js';
import { until } from '../helpers/until.js';
import { watchSubscribers } from '../helpers/zmq-receive.js';

const BS = 4;

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  while (cleanups.length > 0) await cleanups.pop()!();
});

function stored(first: number, tag: bigint) {
  const tokens = [first, first + 1, first + 2, first + 3];
  return { type: 'stored' as const, blockHashes: [tag], parent: null, tokens, blockSize: BS };
}

describe('IngestThread', () => {
  it('a receive that fails ends the stream: reported once, its socket closed; its removal still answered', async () => {
    const { sockets, restore } = watchSubscribers();
    cleanups.push(restore);
    const pub = await TestKvPublisher.start({ topic: 'kv-events' });
    cleanups.push(() => pub.close());
    const reports: IngestReport[] = [];
    const thread = new IngestThread((r) => reports.push(r));
    const of = (op: IngestReport['op']) => reports.filter((r) => r.op === op);
    thread.handle({
      op: 'add',
      id: 5,
      endpoint: pub.endpoint,
      topic: 'kv-events',
      receiveHighWaterMark: 1000,
      maxMessageBytes: 1 << 20,
      eagle: false,
    });
    cleanups.push(async () => {
      thread.handle({ op: 'remove', id: 5 });
      await until(() => of('removed').length === 1, 'the removal');
    });
    expect(of('added')).toEqual([{ op: 'added', id: 5 }]);
    await pub.waitForSubscribers();
    await pub.publish([stored(1, 10n)]);
    await until(() => of('batches').length === 1, 'the first batch');
    expect(sockets).toHaveLength(1);
    const sub = sockets[0]!;
    // The receive after the next message times out: a receive error, which ZMQ does not recover from.
    sub.receiveTimeout = 1;
    await pub.publish([stored(5, 20n)]);
    await until(() => of('ended').length > 0, 'the end of the stream');
    expect(of('ended')).toEqual([{ op: 'ended', id: 5, error: expect.stringMatching(/timed out/) }]);
    // Nothing reads the socket any more: closed, so ZMQ neither reconnects it nor queues what the engine sends.
    expect(sub.closed).toBe(true);
    await until(() => of('batches').length === 2, 'the batch received before the end');
    thread.handle({ op: 'remove', id: 5 });
    await until(() => of('removed').length === 1, 'the removal');
    cleanups.pop();
    expect(of('ended')).toHaveLength(1);
  });
});
