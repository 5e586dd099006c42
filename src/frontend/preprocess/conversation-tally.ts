/**
 * What the conversation caches of every thread hold and save, as the main
 * thread learns it from results (each result carries its thread's cache size
 * after it): per model, the bytes and entries of each thread's cache (the
 * latest reported), and the prompt tokens reused from a cached conversation
 * or tokenized anew. The gateway writes them to `/metrics` at each scrape.
 */
import type { PreprocessResult } from './protocol.js';

export interface ConversationTotals {
  bytes: number;
  entries: number;
  /** Prompt tokens of text prompts taken from a cached conversation, and the others, since start. */
  reusedTokens: number;
  newTokens: number;
}

export class ConversationTally {
  /** Per model: each thread's latest cache size, and the token counts. */
  readonly #models = new Map<
    string,
    { threads: Map<number, { bytes: number; entries: number }>; reused: number; fresh: number }
  >();

  /** Told each noted result's reused and new token counts (the gateway counts them in /metrics). */
  onTokens: ((model: string, reused: number, fresh: number) => void) | undefined;

  /** Notes a text or chat prompt's result. */
  note(model: string, result: PreprocessResult): void {
    const s = result.stats;
    if (s.conversations === undefined) return;
    let m = this.#models.get(model);
    if (m === undefined) this.#models.set(model, (m = { threads: new Map(), reused: 0, fresh: 0 }));
    const reused = s.reusedTokens ?? 0;
    m.reused += reused;
    m.fresh += result.promptTokens - reused;
    this.onTokens?.(model, reused, result.promptTokens - reused);
    m.threads.set(s.conversations.thread, { bytes: s.conversations.bytes, entries: s.conversations.entries });
  }

  /** Per model, the totals over its threads. */
  totals(): Map<string, ConversationTotals> {
    const out = new Map<string, ConversationTotals>();
    for (const [model, m] of this.#models) {
      let bytes = 0;
      let entries = 0;
      for (const t of m.threads.values()) {
        bytes += t.bytes;
        entries += t.entries;
      }
      out.set(model, { bytes, entries, reusedTokens: m.reused, newTokens: m.fresh });
    }
    return out;
  }
}
