/**
 * A model with `eagle` hashes its prompts over Eagle windows (each block's tokens plus the next one), the hashes
 * its Eagle engines' KV events are indexed under; continued turns of a conversation hash the same way.
 */
import { describe, expect, it } from 'vitest';
import { continuedHashes } from '../../src/frontend/preprocess/conversation-cache.js';
import { ModelPreprocessor } from '../../src/frontend/preprocess/model-preprocessor.js';
import type { PreprocessModelSpec } from '../../src/frontend/preprocess/protocol.js';
import { promptHashes } from '../../src/wasm/index.js';

const spec: PreprocessModelSpec = {
  name: 'demo',
  blockSize: 16,
  tokenizer: { kind: 'demo' },
  segmentCacheTokens: 1_000_000,
  segmentCacheBytes: 64 * 1024 * 1024,
  conversationCacheBytes: 1 << 20,
};

describe('Eagle prompt hashing', () => {
  it("hashes token prompts over Eagle windows when the model's eagle is on, plainly otherwise", async () => {
    const ids = Uint32Array.from({ length: 64 }, (_, i) => 100 + i);
    const run = async (eagle: boolean) =>
      (await ModelPreprocessor.create({ ...spec, eagle })).run({
        kind: 'tokens',
        model: 'demo',
        tokenIds: ids,
        maxPromptTokens: 1000,
      });
    const eagle = (await run(true)).hashes;
    expect([...eagle.local]).toEqual([...promptHashes(ids, 16, { eagle: true }).local]);
    expect(eagle.local.length).toBe(3);
    expect([...(await run(false)).hashes.seq]).toEqual([...promptHashes(ids, 16).seq]);
  });

  it('a continued conversation turn (the cached hashes of its shared ids) hashes as a fresh prompt would', () => {
    const ids = Uint32Array.from({ length: 80 }, (_, i) => 7 + i);
    const cached = promptHashes(ids.subarray(0, 48), 16, { eagle: true });
    const next = continuedHashes(ids, 16, { eagle: true }, cached, 48);
    expect([...next.seq]).toEqual([...promptHashes(ids, 16, { eagle: true }).seq]);
  });
});
