/**
 * Issue 18 (gateway cost per request): a chat prompt sent again is neither
 * rendered nor tokenized again, gives the same ids, and keeps every check; a
 * prompt shorter than one block is not hashed.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { ModelPreprocessor } from '../../src/frontend/preprocess/model-preprocessor.js';
import type { ChatTask, PreprocessModelSpec } from '../../src/frontend/preprocess/protocol.js';
import { isKvgateError } from '../../src/errors/index.js';
import { promptHashes } from '../../src/wasm/index.js';

const spec: PreprocessModelSpec = {
  name: 'demo',
  blockSize: 16,
  tokenizer: { kind: 'demo' },
  segmentCacheTokens: 1_000_000,
  segmentCacheBytes: 64 * 1024 * 1024,
};

function chatTask(messages: unknown[], more: Partial<ChatTask> = {}): ChatTask {
  return { kind: 'chat', model: 'demo', messages, maxPromptTokens: 1_000_000, ...more };
}

describe('prompt memo (issue 18: render each chat prompt once)', () => {
  let pre: ModelPreprocessor;
  beforeAll(async () => {
    pre = await ModelPreprocessor.create(spec);
  });

  it('the same chat again skips the template and the tokenizer and gives equal ids, as an array of its own', async () => {
    const messages = [
      { role: 'system', content: 'You are terse.' },
      { role: 'user', content: 'Say something long enough to fill a block or two.' },
    ];
    const first = await pre.run(chatTask(messages));
    expect(first.stats.renderUs).toBeGreaterThan(0);
    const again = await pre.run(chatTask(structuredClone(messages)));
    expect(again.stats.renderUs).toBe(0);
    expect(again.stats.tokenizeUs).toBe(0);
    expect([...again.tokenIds]).toEqual([...first.tokenIds]);
    expect([...again.hashes.local]).toEqual([...first.hashes.local]);
    // Owned copies: the worker thread transfers (detaches) result buffers.
    expect(again.tokenIds.buffer).not.toBe(first.tokenIds.buffer);
    first.tokenIds.fill(0);
    expect((await pre.run(chatTask(messages))).tokenIds).toEqual(again.tokenIds);
  });

  it('anything that changes the rendered prompt is a different entry', async () => {
    const messages = [{ role: 'user', content: 'hi' }];
    const base = await pre.run(chatTask(messages));
    const variants = [
      chatTask([{ role: 'user', content: 'hi!' }]),
      chatTask(messages, { addGenerationPrompt: false }),
      chatTask(messages, { chatTemplateKwargs: { enable_thinking: false } }),
      chatTask(messages, { tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object' } } }] }),
    ];
    for (const v of variants) expect([...(await pre.run(v)).tokenIds]).not.toEqual([...base.tokenIds]);
    expect([...(await pre.run(chatTask(messages))).tokenIds]).toEqual([...base.tokenIds]);
  });

  it('a remembered prompt is still refused over the token limit', async () => {
    const messages = [{ role: 'user', content: 'hello there' }];
    const n = (await pre.run(chatTask(messages))).tokenIds.length;
    const err = await pre.run(chatTask(messages, { maxPromptTokens: n - 1 })).catch((e: unknown) => e);
    expect(isKvgateError(err, 'KVG_ERR_PROMPT_TOO_LONG')).toBe(true);
  });

  it('a prompt shorter than one block has no hashes, as promptHashes says, without hashing', async () => {
    const r = await pre.run(chatTask([{ role: 'user', content: 'hi' }]));
    expect(r.tokenIds.length).toBeLessThan(spec.blockSize);
    expect(r.hashes.local.length).toBe(0);
    expect(r.hashes.seq.length).toBe(0);
    expect(promptHashes(r.tokenIds, spec.blockSize).local.length).toBe(0);
    expect(r.stats.hashUs).toBe(0);
  });

  // issue 18, round 2: a remembered prompt (or token ids) is answered at once, without the async path
  it('runKnown answers a remembered chat and token ids at once, a new chat not at all, and keeps the checks', async () => {
    const messages = [
      { role: 'user', content: 'known at once? long enough to fill a block of sixteen tokens or more' },
    ];
    expect(pre.runKnown(chatTask(messages))).toBeUndefined();
    const first = await pre.run(chatTask(messages));
    const known = pre.runKnown(chatTask(structuredClone(messages)));
    expect(known).toBeDefined();
    expect(known!.stats.cachedTokens).toBe(first.tokenIds.length);
    expect([...known!.tokenIds]).toEqual([...first.tokenIds]);
    expect([...known!.hashes.local]).toEqual([...first.hashes.local]);
    const ids = pre.runKnown({
      kind: 'tokens',
      model: 'demo',
      tokenIds: first.tokenIds.slice(),
      maxPromptTokens: 1_000_000,
    });
    expect([...ids!.hashes.seq]).toEqual([...first.hashes.seq]);
    let err: unknown;
    try {
      pre.runKnown(chatTask(messages, { maxPromptTokens: 2 }));
    } catch (e) {
      err = e;
    }
    expect(isKvgateError(err, 'KVG_ERR_PROMPT_TOO_LONG')).toBe(true);
  });
});
