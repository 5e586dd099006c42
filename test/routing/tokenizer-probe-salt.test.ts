/**
 * The tokenizer agreement probe on a worker that is already routable: client requests store blocks while it
 * waits for its canary's. A chain of another request that differs from the canary's first block used to be
 * answered as a mismatch at block 0, flagging a healthy worker. Each canary now carries its own `cache_salt`, the
 * engine reports it with the blocks (vLLM in block 0's `extra_keys`, SGLang as `cache_salt`), and only a chain
 * carrying it is the canary's; a chain with no salt that differs from the first block is never a mismatch.
 *
 * The engine double publishes a client request's chain for the first canary (whose own batch is lost, as to the
 * subscription race) and the canary's chain for the second: the probe has seen the client's chain alone for the
 * whole of the resend wait, with no timing in between.
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
  type SaltReport,
} from '../helpers/probe-engine.js';
import { TestKvPublisher, type EventEncoding } from '../helpers/zmq-publisher.js';

/** A client request's prompt: a prefix of its own, new to the cache, that differs from the canary's first token. */
const clientIds = Array.from({ length: 4 * BLOCK }, (_, i) => 9_000 + i);

interface BusyEngine {
  http: HttpEngine;
  pub: TestKvPublisher;
  salts: (string | undefined)[];
}

/**
 * For the first canary, a client request's chain (its salt `clientSalt`) and not the canary's (lost); for the
 * next, the canary's chain, tokenized by `engineTokenize`, its salt reported as `report`.
 */
async function busyEngine(
  report: SaltReport,
  engineTokenize: (m: Messages) => Promise<Uint32Array> = tokenize,
  clientSalt?: string,
): Promise<BusyEngine> {
  const encoding: EventEncoding = report === 'sglang' ? 'sglang-map' : 'vllm-array';
  const pub = await TestKvPublisher.start({ encoding });
  const salts: (string | undefined)[] = [];
  const http = await startHttpEngine(async (req, res) => {
    const body = req.json as { messages: Messages; cache_salt?: string };
    salts.push(body.cache_salt);
    await pub.waitForSubscribers(1);
    const events =
      salts.length === 1
        ? storedChain(clientIds, clientSalt, report)
        : storedChain(await engineTokenize(body.messages), body.cache_salt, report);
    await pub.publish(events);
    answerCanary(res);
  });
  return { http, pub, salts };
}

const probe = (e: BusyEngine, nonce: string, timeoutMs = 10_000): ReturnType<typeof probeTokenizer> =>
  probeTokenizer({
    worker: probeWorker(e.http.url, e.pub.endpoint),
    servedModelName: 'm',
    tokenize,
    timeoutMs,
    resendAfterMs: 100,
    nonce,
  });

describe("probeTokenizer while client requests store blocks before the canary's", () => {
  let engine: BusyEngine | undefined;
  afterEach(async () => {
    await engine?.http.close();
    await engine?.pub.close();
    engine = undefined;
  });

  for (const report of ['vllm', 'sglang'] as const) {
    it(`${report}: a client's chain with a new prefix is not the canary's; the salted chain answers ok`, async () => {
      engine = await busyEngine(report);
      expect(await probe(engine, `s-${report}`)).toMatchObject({ outcome: 'ok', blockSize: BLOCK });
      // Each canary under a salt of its own.
      expect(engine.salts).toEqual([`kvgate-canary-s-${report}`, `kvgate-canary-again-s-${report}`]);
    }, 30_000);
  }

  it("a client's chain under another salt is never compared", async () => {
    engine = await busyEngine('vllm', tokenize, 'tenant-a');
    expect(await probe(engine, 's-other')).toMatchObject({ outcome: 'ok', blockSize: BLOCK });
  }, 30_000);

  it('a salted chain that differs is still a mismatch, at its first differing block', async () => {
    engine = await busyEngine('vllm', shiftedTokenize);
    expect(await probe(engine, 's-mis')).toMatchObject({ outcome: 'mismatch', block: 2, offset: 8 });
  }, 30_000);

  it('an engine that reports no salt: an unsalted chain that differs from the first block is inconclusive, not a mismatch', async () => {
    // The canary's own chain differs from its first token here: indistinguishable from another request's prefix.
    engine = await busyEngine('none', async () => Uint32Array.from(clientIds));
    const r = await probe(engine, 's-old', 600);
    expect(r).toMatchObject({ outcome: 'inconclusive' });
    expect((r as { reason: string }).reason).toMatch(
      /^no BlockStored event of the canary arrived within 600 ms: 2 chain\(s\) of blocks differ from its first block/,
    );
  }, 30_000);

  it('an engine that reports no salt: the canary chain that agrees is still found among the others', async () => {
    engine = await busyEngine('none');
    expect(await probe(engine, 's-old-ok')).toMatchObject({ outcome: 'ok', blockSize: BLOCK });
  }, 30_000);
});
