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
import type { WorkerInfo } from '../../src/discovery/index.js';
import { probeTokenizer } from '../../src/routing/index.js';
import { fallbackTokenizer } from '../../src/tokenizer/index.js';
import { sendJson, startHttpEngine, type HttpEngine } from '../helpers/http-engine.js';
import { TestKvPublisher, type EventEncoding, type TestEvent } from '../helpers/zmq-publisher.js';

type Messages = readonly { role: string; content: string }[];

const BLOCK = 16;
const tok = fallbackTokenizer();
const tokenize = async (messages: Messages): Promise<Uint32Array> =>
  Uint32Array.from(
    await tok.encode(tok.renderChat(messages, { addGenerationPrompt: true }), { addSpecialTokens: false }),
  );

/** How the engine reports a request's salt with its blocks: as vLLM, as SGLang, or not at all (an older vLLM). */
type SaltReport = 'vllm' | 'sglang' | 'none';

let nextHash = 1n;
/** One BlockStored event per full block of `ids`, chained from the root, the salt reported on the first as `report`. */
function storedEvents(ids: ArrayLike<number>, salt: string | undefined, report: SaltReport): TestEvent[] {
  const out: TestEvent[] = [];
  let parent: bigint | null = null;
  for (let b = 0; b + BLOCK <= ids.length; b += BLOCK) {
    const h = nextHash++;
    const tokens = Array.from(ids).slice(b, b + BLOCK);
    const ev: TestEvent = { type: 'stored', blockHashes: [h], parent, tokens, blockSize: BLOCK };
    if (salt !== undefined && report === 'vllm') ev.extraKeys = [parent === null ? [salt] : null];
    if (salt !== undefined && report === 'sglang') ev.cacheSalt = salt;
    out.push(ev);
    parent = h;
  }
  return out;
}

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
        ? storedEvents(clientIds, clientSalt, report)
        : storedEvents(await engineTokenize(body.messages), body.cache_salt, report);
    await pub.publish(events);
    sendJson(res, 200, {
      id: 'c',
      object: 'chat.completion',
      choices: [{ index: 0, message: { role: 'assistant', content: 'ok' } }],
    });
  });
  return { http, pub, salts };
}

const worker = (e: BusyEngine): WorkerInfo => ({
  id: 1,
  model: 'm',
  url: e.http.url,
  role: 'aggregated',
  dialect: 'vllm',
  dpStart: 0,
  dpSize: 1,
  kvEvents: { endpoint: e.pub.endpoint },
});

const probe = (e: BusyEngine, nonce: string, timeoutMs = 10_000): ReturnType<typeof probeTokenizer> =>
  probeTokenizer({ worker: worker(e), servedModelName: 'm', tokenize, timeoutMs, resendAfterMs: 100, nonce });

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
    const engineTokenize = async (m: Messages): Promise<Uint32Array> => {
      const ids = await tokenize(m);
      ids[40] = ids[40]! + 1;
      return ids;
    };
    engine = await busyEngine('vllm', engineTokenize);
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
