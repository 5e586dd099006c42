/**
 * The prompts the KV-event end-to-end bench and the pause bench decide on: one seeded document of `tokens`
 * tokens, and each prompt that document with a random tail from a random token on (so prompts in flight share
 * prefixes of every length), with its block hashes as a preprocessing thread would hand them to the router.
 * Made before any clock starts: making one costs more than deciding it.
 */
import { seededRng } from '../../src/common/index.js';
import { promptHashes, type PromptHashes } from '../../src/wasm/index.js';

export interface DecisionPrompt {
  readonly tokens: Uint32Array;
  readonly hashes: PromptHashes;
}

export function oneDocumentPrompts(count: number, tokens: number, blockSize: number): DecisionPrompt[] {
  const rng = seededRng(11);
  const doc = Uint32Array.from({ length: tokens }, () => Math.floor(rng() * 150_000));
  return Array.from({ length: count }, () => {
    const prompt = doc.slice();
    for (let i = Math.floor(rng() * tokens); i < tokens; i++) prompt[i] = Math.floor(rng() * 150_000);
    return { tokens: prompt, hashes: promptHashes(prompt, blockSize) };
  });
}
