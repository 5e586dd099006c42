/** What the picker suites share: a `kvgate mocker` engine standing for one pod of an InferencePool. */
import { startCli, type CliProcess, type MockerLine } from '../../helpers/cli-process.js';
import { until } from '../../helpers/until.js';

/**
 * One `kvgate mocker` engine on `host:port` (0: OS-chosen), its KV events on `kvPort` (0: OS-chosen; with `dpSize`
 * ranks, rank r's on `kvPort` + r), as one pod.
 */
export async function startPod(
  host: string,
  port: number,
  kvPort = 0,
  dpSize = 1,
): Promise<{ proc: CliProcess; engine: MockerLine }> {
  const proc = startCli([
    'mocker',
    '--host',
    host,
    '--port',
    String(port),
    '--kv-events-port',
    String(kvPort),
    '--dp-size',
    String(dpSize),
    '--speedup',
    '1000',
    '--tokenizer',
    'demo',
  ]);
  const line = await proc.waitFor(/^\{"index".*$/m, `the mocker on ${host}`);
  return { proc, engine: JSON.parse(line[0]) as MockerLine };
}

/** A document of `words` words distinct to `tag`: documents with different tags differ from their first block. */
export const doc = (tag: string, words = 600): string =>
  Array.from({ length: words }, (_, i) => `${tag}${(i * 7919) % 10007}`).join(' ');

/**
 * Waits until the picker's KV-event subscription to each of `count` publishers is live: ZMQ drops what is published
 * before the subscriber connects, and nothing tells when that is, so a new short document is sent to publisher i
 * (`send(i, document)`, past the picker) until the picker's count of applied events (`applied`) moves, 21 tries each.
 */
export async function untilSubscribed(
  count: number,
  send: (i: number, document: string) => Promise<unknown>,
  applied: () => Promise<number>,
): Promise<void> {
  for (let i = 0; i < count; i++) {
    for (let n = 0; ; n++) {
      const before = await applied();
      await send(i, doc(`warm${i}x${n}`, 40));
      const seen = await until(async () => (await applied()) > before, 'events', 1000).then(
        () => true,
        () => false,
      );
      if (seen) break;
      if (n > 20) throw new Error(`no KV events from publisher ${i}`);
    }
  }
}
