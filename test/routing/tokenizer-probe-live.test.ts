/**
 * The tokenizer agreement probe against a real engine over real sockets (an in-process mocker: HTTP and
 * ZMQ on loopback). issue 16, tokenizer agreement probe: the engine's own tokenization of the canary is
 * compared; a probe whose events never come is inconclusive, never a mismatch.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startMocker, type MockerHandle } from '../../src/mocker/index.js';
import { probeTokenizer } from '../../src/routing/index.js';
import {
  canaryTokenize as tokenize,
  probeWorker,
  shiftedTokenize,
  type ChatMessages,
} from '../helpers/probe-engine.js';
import { TestKvPublisher } from '../helpers/zmq-publisher.js';

describe('probeTokenizer against a mocker engine', () => {
  let engine: MockerHandle;
  let silent: TestKvPublisher;

  beforeAll(async () => {
    engine = await startMocker({ model: 'm', blockSize: 16, kvEvents: true, speedup: 100, seed: 1 });
    silent = await TestKvPublisher.start();
  });

  afterAll(async () => {
    await engine.close();
    await silent.close();
  });

  const worker = (kvEvents: string): ReturnType<typeof probeWorker> => probeWorker(engine.url, kvEvents);

  /**
   * The bound on the engine's events where they do come: a probe answers as soon as they arrive, so a wide bound
   * costs nothing, while 5 s ran out once on a loaded 2-core CI machine (an `inconclusive` where `mismatch` was due).
   */
  const ANSWERED_WITHIN_MS = 20_000;

  /**
   * A probe of the engine. ZMQ's PUB drops what it publishes before it has taken the SUB's subscription, which the
   * SUB's handshake does not wait for: on a starved CI machine the first canary's events went out first once. The
   * probe sends the canary again when none of its blocks came (tokenizer-probe-race.test.ts pins that down).
   */
  const probeAnswered = (nonce: string, tokenizeWith: typeof tokenize): ReturnType<typeof probeTokenizer> =>
    probeTokenizer({
      worker: worker(engine.kvEventsEndpoints[0]!),
      servedModelName: 'm',
      tokenize: tokenizeWith,
      timeoutMs: ANSWERED_WITHIN_MS,
      nonce,
    });

  it('agrees with an engine that tokenizes as kvgate does', async () => {
    const r = await probeAnswered('n1', tokenize);
    expect(r).toMatchObject({ outcome: 'ok', blockSize: 16 });
  });

  it('a different tokenization is a mismatch at the first differing block', async () => {
    const r = await probeAnswered('n2', shiftedTokenize);
    expect(r).toMatchObject({ outcome: 'mismatch', block: 2, offset: 8 });
  });

  it("a tokenization that differs from the first token is a mismatch at block 0: the engine reports the canary's salt", async () => {
    // Without the salt (vLLM's extra_keys), such a chain could be another request's: the probe would not call it a mismatch.
    const first = async (messages: ChatMessages): Promise<Uint32Array> => {
      const ids = await tokenize(messages);
      ids[0] = ids[0]! + 1;
      return ids;
    };
    const r = await probeAnswered('n2b', first);
    expect(r).toMatchObject({ outcome: 'mismatch', block: 0, offset: 0 });
  });

  it('no BlockStored event within the bound: inconclusive', async () => {
    const r = await probeTokenizer({
      worker: worker(silent.endpoint),
      servedModelName: 'm',
      tokenize,
      timeoutMs: 300,
      nonce: 'n3',
    });
    expect(r).toEqual({ outcome: 'inconclusive', reason: 'no BlockStored event of the canary arrived within 300 ms' });
  });

  it('a rank whose endpoint cannot be derived (an ipc:// path beyond rank 0) is inconclusive, not a throw', async () => {
    const r = await probeTokenizer({
      worker: { ...worker('ipc:///tmp/kvgate-probe-never'), dpSize: 2 },
      servedModelName: 'm',
      tokenize,
      timeoutMs: 300,
      nonce: 'n4',
    });
    expect(r.outcome).toBe('inconclusive');
    expect((r as { reason: string }).reason).toMatch(/did not connect: .*ipc:\/\/\/tmp\/kvgate-probe-never/);
  });
});
