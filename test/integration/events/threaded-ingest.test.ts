/**
 * KV events received and decoded on ingestion threads (`kv_events.ingest_threads`), against two mocker
 * engines' real ZMQ publishers, one per thread: the index follows both engines, batches dropped on the wire
 * are found as gaps and recovered through the engines' replay buffers, and a restarted engine's slot is
 * cleared and rebuilt, exactly as on the main-thread path. A salted request's blocks, and its follow-up's
 * (which inherit the salt: vLLM reports it on the chain's first event only), are indexed under its salt,
 * hashed on the thread (batch-hasher.ts).
 */
import { afterEach, describe, expect, it } from 'vitest';
import { seededRng } from '../../../src/common/index.js';
import { promptHashes } from '../../../src/wasm/index.js';
import { BLOCK, drain, prepare, randomTokens, startFleet, until, type Fleet } from '../../helpers/fleet.js';
import { sampleSum } from '../../helpers/metric-sum.js';

describe('KV events on ingestion threads', () => {
  let fleet: Fleet | undefined;
  afterEach(async () => {
    await fleet?.close();
    fleet = undefined;
  });

  it('follows two engines through dropped batches (gap, replay) and a restart', async () => {
    fleet = await startFleet(2, { router: { kvEvents: { ingestThreads: 2 } } });
    const f = fleet;
    expect(f.router.events!.ingestThreads).toBe(2);
    const rng = seededRng(28);
    const index = f.router.decode.kvRouter!.index;
    /** The deepest prefix of `tokens` any engine holds, in blocks. */
    const depth = (tokens: number[]): number => {
      const m = index.findMatches(prepare(tokens).hashes.local);
      return m.count === 0 ? 0 : Math.max(...m.depths.subarray(0, m.count));
    };
    const send = async (tokens: number[]): Promise<void> => {
      await drain(await f.router.route(prepare(tokens)));
    };
    /** Sends fresh one-block prompts (each makes its engine publish a batch) until `done`. */
    const sendUntil = async (done: () => boolean | Promise<boolean>, what: string): Promise<void> => {
      for (let i = 0; !(await done()); i++) {
        if (i > 60) throw new Error(`never: ${what}`);
        await send([...randomTokens(rng, BLOCK), i]);
        await until(done, what, 200).catch(() => undefined);
      }
    };
    // Both subscriptions live (ZMQ slow joiner: a missed first batch is replayed).
    const slots = (): number =>
      new Set(
        f.router
          .events!.sources()
          .filter((s) => f.router.events!.eventStatus(s.workerId) === 'live')
          .map((s) => s.workerId),
      ).size;
    await sendUntil(() => slots() === 2, 'events from both engines');

    const a = randomTokens(rng, 10 * BLOCK);
    await send([...a, 1]);
    await until(() => depth(a) === 10, 'doc a');

    // Both engines drop their next two batches on the wire: later batches reveal the gaps, replay fills them.
    for (const m of f.mockers) m.setFaults({ dropNextEventBatches: 2 });
    const docs = [6, 7, 5].map((n) => ({ n, tokens: randomTokens(rng, n * BLOCK) }));
    for (const d of docs) await send([...d.tokens, 1]);
    await sendUntil(() => docs.every((d) => depth(d.tokens) === d.n), 'dropped batches recovered through replay');
    const text = await f.metrics.text();
    expect(sampleSum(text, 'kvgate_kv_event_replays_total', { outcome: 'recovered' })).toBeGreaterThan(0);
    expect(sampleSum(text, 'kvgate_kv_event_gaps_total')).toBeGreaterThan(0);

    // An engine restarts (fresh cache, sequence from 0): its slot is cleared and rebuilt from its new batches.
    await f.mockers[0]!.restart();
    await sendUntil(
      async () =>
        sampleSum(await f.metrics.text(), 'kvgate_kv_event_publisher_restarts_total', { worker_id: '1' }) === 1,
      'restart noticed',
    );
    const e = randomTokens(rng, 4 * BLOCK);
    await send([...e, 1]);
    await sendUntil(() => depth(e) === 4, 'doc e after the restart');
  }, 60_000);

  it("indexes a salted request and its follow-up under the request's salt", async () => {
    fleet = await startFleet(1, { router: { kvEvents: { ingestThreads: 1 } } });
    const f = fleet;
    const rng = seededRng(29);
    const index = f.router.decode.kvRouter!.index;
    const depth = (tokens: number[], cacheSalt?: string): number => {
      const m = index.findMatches(promptHashes(Uint32Array.from(tokens), BLOCK, { cacheSalt }).local);
      return m.count === 0 ? 0 : m.depths[0]!;
    };
    const send = async (tokens: number[], cacheSalt?: string): Promise<void> => {
      const req = prepare(tokens);
      const salted =
        cacheSalt === undefined
          ? req
          : {
              ...req,
              body: { ...req.body, cache_salt: cacheSalt },
              hashes: promptHashes(Uint32Array.from(tokens), BLOCK, { cacheSalt }),
            };
      await drain(await f.router.route(salted));
    };
    // The subscription live (ZMQ slow joiner: a missed first batch is replayed).
    for (let i = 0; f.router.events!.eventStatus(1) !== 'live'; i++) {
      if (i > 60) throw new Error('never: events from the engine');
      await send([...randomTokens(rng, BLOCK), i]);
      await until(() => f.router.events!.eventStatus(1) === 'live', 'events', 200).catch(() => undefined);
    }
    const a = randomTokens(rng, 4 * BLOCK);
    await send([...a, 1], 'tenant-a');
    await until(() => depth(a, 'tenant-a') === 4, 'the salted request');
    const b = [...a, ...randomTokens(rng, 3 * BLOCK)];
    await send([...b, 1], 'tenant-a');
    await until(() => depth(b, 'tenant-a') === 7, 'its follow-up, under its salt');
    expect(depth(b)).toBe(0);
    expect(depth(b, 'tenant-b')).toBe(0);
  }, 60_000);
});
