/**
 * Which preprocessing thread a request goes to: a chat's or a text prompt's turns keep to one thread (their
 * conversation cache is there), and prompts of token ids, which keep nothing on a thread, spread over the threads
 * even when they all begin with one app's system prompt, as an agent's sessions do.
 */
import { describe, expect, it } from 'vitest';
import { seededRng } from '../../src/common/index.js';
import { bodyAffinity, taskAffinity } from '../../src/frontend/preprocess/affinity.js';
import type { PreprocessTask } from '../../src/frontend/preprocess/protocol.js';

const THREADS = 4;

/** One app's sessions: the same 2,000 leading ids (its system prompt and tools), then each session's own. */
function sessions(count: number): number[][] {
  const rnd = seededRng(5);
  const app = Array.from({ length: 2000 }, () => Math.floor(rnd() * 151_000));
  return Array.from({ length: count }, () => [
    ...app,
    ...Array.from({ length: 3000 }, () => Math.floor(rnd() * 151_000)),
  ]);
}

/** How many requests each thread gets. */
function spread(keys: number[]): number[] {
  const per = new Array<number>(THREADS).fill(0);
  for (const k of keys) per[k % THREADS]!++;
  return per;
}

const body = (json: unknown): Buffer => Buffer.from(JSON.stringify(json));

describe('preprocessing thread affinity', () => {
  it('spreads the token-id prompts of one app over every thread, in a body and as a task', () => {
    const prompts = sessions(64);
    const fromBodies = spread(prompts.map((prompt) => bodyAffinity(body({ model: 'm', prompt, max_tokens: 1 }))));
    const fromTasks = spread(
      prompts.map((tokenIds) =>
        taskAffinity({ kind: 'tokens', tokenIds: Uint32Array.from(tokenIds) } as PreprocessTask),
      ),
    );
    for (const per of [fromBodies, fromTasks]) for (const n of per) expect(n).toBeGreaterThanOrEqual(8);
    // With spaces and new lines around the array, as other JSON writers put them.
    const spaced = Buffer.from(`{"model": "m", "prompt" :\n [ ${prompts[0]!.join(', ')} ]}`);
    expect(Number.isInteger(bodyAffinity(spaced))).toBe(true);
  });

  it("keeps a chat's turns, and a text prompt's, on one thread as they grow", () => {
    const messages: { role: string; content: string }[] = [
      { role: 'system', content: 'You are a coding agent. '.repeat(200) },
      // An agent's task, longer than the bytes the key reads (a shorter one lets the key reach the next message).
      { role: 'user', content: 'Fix the failing test in src/app.ts. '.repeat(20) },
    ];
    const chat = new Set<number>();
    let text = 'You are a coding agent. '.repeat(200);
    const texts = new Set<number>();
    for (let turn = 0; turn < 10; turn++) {
      chat.add(bodyAffinity(body({ model: 'm', messages })));
      texts.add(bodyAffinity(body({ model: 'm', prompt: text })));
      messages.push({ role: 'assistant', content: `Step ${turn} done. `.repeat(300) });
      messages.push({ role: 'user', content: `Go on with step ${turn + 1}.` });
      text += `Step ${turn} done. `.repeat(300);
    }
    expect(chat.size).toBe(1);
    // OpenAI's `user` field before the messages is not the first user message: sessions of one user still spread.
    const sessions = new Set<number>();
    for (let k = 0; k < 16; k++) {
      const task = { role: 'user', content: `Session ${k}: fix the failing test in src/app.ts. `.repeat(20) };
      sessions.add(bodyAffinity(body({ model: 'm', user: 'alice', messages: [messages[0], task] })) % THREADS);
    }
    expect(sessions.size).toBeGreaterThan(1);
    expect(texts.size).toBe(1);
    // A prompt of several texts is text too: kept by its first bytes, not spread by its last.
    const batch = (last: string): number =>
      bodyAffinity(body({ model: 'm', prompt: ['a first text of some length. '.repeat(30), last] }));
    expect(batch('one ending')).toBe(batch('another ending'));
  });
});
