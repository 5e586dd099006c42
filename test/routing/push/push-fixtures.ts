/**
 * What the push folder's tests share besides the engine double: the one
 * completion leg they route (a 10-token prompt in blocks of 4, so 3 prompt
 * blocks, 2 of them complete), and reading how a promise failed.
 */
import { Cancellation } from '../../../src/common/index.js';
import type { LegRequest } from '../../../src/routing/index.js';
import { promptHashes } from '../../../src/wasm/index.js';

export const MODEL = 'mock-model';
export const BS = 4;
export const PROMPT = Array.from({ length: 10 }, (_, i) => 100 + i);

/** A streamed `/v1/completions` leg of PROMPT, received at `receivedAt`; its signal is the test's to fire. */
export function completionLeg(
  requestId: string,
  receivedAt: number,
  over: Partial<LegRequest> = {},
): LegRequest & { signal: Cancellation } {
  return {
    requestId,
    path: '/v1/completions',
    body: { model: MODEL, prompt: PROMPT, max_tokens: 4, stream: true },
    stream: true,
    isl: PROMPT.length,
    hashes: promptHashes(Uint32Array.from(PROMPT), BS),
    routing: {},
    phase: 'aggregated',
    signal: new Cancellation(),
    receivedAt,
    ...over,
  } as LegRequest & { signal: Cancellation };
}

/** The error `p` rejected with; undefined when it resolved. */
export function rejection(p: Promise<unknown>): Promise<unknown> {
  return p.then(
    () => undefined,
    (err: unknown) => err,
  );
}
