/**
 * The tokenizer agreement probe when the engine's PUB has not taken the probe's subscription yet as it publishes
 * the canary's events (ZMQ drops them; the SUB's handshake comes before, and nothing tells the SUB): the probe
 * sends the canary once more behind another nonce and answers from that one's events, ok or mismatch as due; a
 * silent engine stays inconclusive within the bound. The engine double drops the first canary's batch, as the PUB
 * does, and publishes later ones once the subscription has arrived (what the first canary's round trip buys).
 */
import { afterEach, describe, expect, it } from 'vitest';
import { probeTokenizer } from '../../src/routing/index.js';
import { startHttpEngine, type HttpEngine } from '../helpers/http-engine.js';
import {
  answerCanary,
  canaryTokenize as tokenize,
  PROBE_BLOCK as BLOCK,
  probeWorker,
  shiftedTokenize,
  storedChain,
  type ChatMessages as Messages,
} from '../helpers/probe-engine.js';
import { TestKvPublisher } from '../helpers/zmq-publisher.js';

interface RacyEngine {
  http: HttpEngine;
  pub: TestKvPublisher;
  canaryIds: string[];
}

/**
 * An engine whose PUB has not taken the subscription when the first canary's events go out (the batch is dropped),
 * and has when the next canary's do. `engineTokenize` is the engine's own tokenization; `silent` publishes nothing.
 */
async function racyEngine(engineTokenize: (m: Messages) => Promise<Uint32Array>, silent = false): Promise<RacyEngine> {
  const pub = await TestKvPublisher.start();
  const canaryIds: string[] = [];
  const http = await startHttpEngine(async (req, res) => {
    canaryIds.push(String(req.headers['x-request-id']));
    const ids = await engineTokenize((req.json as { messages: Messages }).messages);
    if (!silent) {
      const first = canaryIds.length === 1;
      if (!first) await pub.waitForSubscribers(1);
      await pub.publish(storedChain(ids), { drop: first });
    }
    answerCanary(res);
  });
  return { http, pub, canaryIds };
}

/** A wide bound where the events do come (the probe answers as they arrive); the resend is early so the test is short. */
const ANSWERED_WITHIN_MS = 10_000;

/** The probe of `e`; with a `timeoutMs` of its own, its resend at the default (a quarter of it), else early. */
const probe = (e: RacyEngine, nonce: string, timeoutMs?: number): ReturnType<typeof probeTokenizer> =>
  probeTokenizer({
    worker: probeWorker(e.http.url, e.pub.endpoint),
    servedModelName: 'm',
    tokenize,
    timeoutMs: timeoutMs ?? ANSWERED_WITHIN_MS,
    resendAfterMs: timeoutMs === undefined ? 100 : undefined,
    nonce,
  });

describe('probeTokenizer when the first canary is published before the subscription is taken', () => {
  let engine: RacyEngine | undefined;
  afterEach(async () => {
    await engine?.http.close();
    await engine?.pub.close();
    engine = undefined;
  });

  it('answers ok from the second canary, sent behind another nonce', async () => {
    engine = await racyEngine(tokenize);
    const r = await probe(engine, 'w1-abc');
    expect(r).toMatchObject({ outcome: 'ok', blockSize: BLOCK });
    expect(engine.canaryIds).toEqual(['kvgate-canary-w1-abc', 'kvgate-canary-again-w1-abc']);
  }, 30_000);

  it("answers a mismatch from the second canary's events, at the first differing block", async () => {
    engine = await racyEngine(shiftedTokenize);
    const r = await probe(engine, 'w1-def');
    expect(r).toMatchObject({ outcome: 'mismatch', block: 2, offset: 8, blockSize: BLOCK });
    expect(engine.canaryIds).toHaveLength(2);
  }, 30_000);

  it('an engine that publishes nothing: inconclusive within the bound, after the canary was sent twice', async () => {
    engine = await racyEngine(tokenize, true);
    const started = performance.now();
    const r = await probe(engine, 'w1-ghi', 400);
    // The handshake and the first canary are bounded apart; the wait for events (the resend inside it) by 400 ms.
    expect(r).toEqual({ outcome: 'inconclusive', reason: 'no BlockStored event of the canary arrived within 400 ms' });
    expect(engine.canaryIds).toEqual(['kvgate-canary-w1-ghi', 'kvgate-canary-again-w1-ghi']);
    expect(performance.now() - started).toBeLessThan(3 * 400 + 2_000);
  });
});
