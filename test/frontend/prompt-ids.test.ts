/**
 * A prompt's token ids are handed to the main thread only where they are read: by a router port that reads them
 * (`readsTokenIds`, absent = true), or in an answer that shows them (`/v1/route` unless `return_token_ids: false`,
 * the `query_instance_id:` answer's `nvext.token_ids`). kvgate's own router reads the length alone, so an agent's
 * 128k-token turn no longer copies and hands over 512 KB of ids it never reads.
 *
 * The preprocessor is checked directly (the conversation cache's turns with and without the ids give the same
 * length and hashes), then real gateways with a preprocessing thread: one parsing every body there, one parsing
 * small bodies on the main thread, each with a port that reads the ids and one that does not.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { seededRng, type Rng } from '../../src/common/index.js';
import { ModelPreprocessor } from '../../src/frontend/preprocess/model-preprocessor.js';
import type { ChatTask } from '../../src/frontend/preprocess/protocol.js';
import { FakeRouter } from './fake-router.js';
import { largeBodyConfig, post, startPoolGateway, type PoolGateway } from './server-harness.js';

const WORDS = 'agents resend their whole conversation every turn with tool results and ünïcode 日本語 names'.split(' ');

function text(rng: Rng, words: number): string {
  return Array.from({ length: words }, () => WORDS[Math.floor(rng() * WORDS.length)]!).join(' ');
}

type Message = { role: string; content: string };

describe('ModelPreprocessor: returnTokenIds', () => {
  it('leaves the ids out when asked, with the same length, hashes and conversation reuse', async () => {
    const spec = {
      name: 'demo',
      blockSize: 16,
      tokenizer: { kind: 'demo' } as const,
      segmentCacheTokens: 1_000_000,
      segmentCacheBytes: 64 << 20,
      conversationCacheBytes: 64 << 20,
    };
    const lean = await ModelPreprocessor.create(spec);
    const full = await ModelPreprocessor.create(spec);
    const rng = seededRng(3);
    const messages: Message[] = [{ role: 'system', content: text(rng, 3000) }];
    for (let turn = 0; turn < 6; turn++) {
      messages.push({ role: 'user', content: text(rng, 400) });
      const task = (returnTokenIds: boolean | undefined): ChatTask => ({
        kind: 'chat',
        model: 'demo',
        maxPromptTokens: 1_000_000,
        messages: messages.map((m) => ({ ...m })),
        returnTokenIds,
      });
      const a = await lean.run(task(false));
      const b = await full.run(task(turn % 2 === 0 ? undefined : true));
      expect(a.tokenIds).toHaveLength(0);
      expect(b.tokenIds.length).toBeGreaterThan(3000);
      expect(a.promptTokens).toBe(b.tokenIds.length);
      expect(b.promptTokens).toBe(b.tokenIds.length);
      expect([...a.hashes.seq]).toEqual([...b.hashes.seq]);
      expect([...a.hashes.local]).toEqual([...b.hashes.local]);
      // The conversation cache keeps its own ids either way: a follow-up reuses the last turn's.
      if (turn > 0) expect(a.stats.reusedTokens).toBe(b.stats.reusedTokens);
      if (turn > 0) expect(a.stats.reusedTokens).toBeGreaterThan(3000);
      messages.push({ role: 'assistant', content: text(rng, 300) });
    }
  });
});

const config = largeBodyConfig();

describe.each([
  ['every body parsed on the preprocessing thread', -1],
  ['small bodies parsed on the main thread', 1 << 30],
])('the ids handed to the router port (%s)', (_name, inlineMaxBodyBytes) => {
  const gateways: PoolGateway[] = [];
  beforeAll(async () => {
    // A port that reads the ids (the default), and one that reads the length alone (as kvgate's router).
    for (const readsTokenIds of [undefined, false]) {
      const router = Object.assign(new FakeRouter({ model: 'demo', workerIds: [1] }), { readsTokenIds });
      gateways.push(await startPoolGateway(config, router, { threads: 1, inlineMaxBodyBytes, inlineMaxChars: -1 }));
    }
  }, 60_000);
  afterAll(async () => {
    for (const g of gateways) await g.close();
  });

  it('are all there for a port that reads them, and none for one that does not, unless the answer shows them', async () => {
    const rng = seededRng(9);
    const messages: Message[] = [{ role: 'system', content: text(rng, 20_000) }];
    for (let turn = 0; turn < 3; turn++) {
      messages.push({ role: 'user', content: text(rng, 200) });
      const body = { model: 'demo', messages, max_tokens: 1 };
      const seen = [];
      for (const g of gateways) {
        expect((await post(`${g.url}/v1/chat/completions`, body)).status).toBe(200);
        const routed = g.router.routed.at(-1)!;
        const lean = await post(`${g.url}/v1/route`, { ...body, return_token_ids: false });
        const leanQuery = g.router.queried.at(-1)!;
        const shown = await post(`${g.url}/v1/route`, body);
        const shownQuery = g.router.queried.at(-1)!;
        const annotated = await post(`${g.url}/v1/chat/completions`, {
          ...body,
          nvext: { annotations: ['query_instance_id:'] },
        });
        seen.push({
          routed: routed.tokenIds.length,
          promptTokens: routed.promptTokens,
          lean: { status: lean.status, answer: lean.json.token_ids, query: leanQuery.tokenIds.length },
          leanTokens: [lean.json.prompt_tokens, leanQuery.promptTokens],
          shown: { status: shown.status, ids: shown.json.token_ids, query: shownQuery.tokenIds.length },
          annotated: { status: annotated.status, ids: annotated.json.nvext?.token_ids },
          seq: [...routed.hashes.seq],
        });
      }
      const [reads, lengthOnly] = seen as [(typeof seen)[0], (typeof seen)[0]];
      const n = reads.promptTokens;
      expect(n).toBeGreaterThan(20_000);
      // A port that reads the ids gets them on every request, as before.
      expect(reads).toMatchObject({ routed: n, lean: { status: 200, answer: undefined, query: n } });
      // One that reads the length alone gets the ids only where the answer shows them.
      expect(lengthOnly.routed).toBe(0);
      expect(lengthOnly.promptTokens).toBe(n);
      expect(lengthOnly.lean).toEqual({ status: 200, answer: undefined, query: 0 });
      expect(lengthOnly.leanTokens).toEqual([n, n]);
      expect(lengthOnly.shown.query).toBe(n);
      // Both answer alike: the same ids where they are shown, the same hashes routed by.
      expect(lengthOnly.shown).toEqual(reads.shown);
      expect(lengthOnly.shown.ids).toHaveLength(n);
      expect(lengthOnly.annotated).toEqual(reads.annotated);
      expect(lengthOnly.annotated).toMatchObject({ status: 200 });
      expect(lengthOnly.annotated.ids).toHaveLength(n);
      expect(lengthOnly.seq).toEqual(reads.seq);
    }
  });
});
