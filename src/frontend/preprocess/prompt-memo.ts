/**
 * A memo of chat prompts already rendered and tokenized: the token ids of a
 * chat request, by everything that decides them (messages, tools, template
 * options, add_special_tokens). Rendering a chat template with
 * @huggingface/jinja costs tens of microseconds even for one short message
 * (its runtime builds the builtins of every value it touches), more than the
 * rest of a small request's gateway work; the same conversation sent again
 * (retries, fan-out, identical probes and benchmark prompts) skips it.
 *
 * Contract: the ids returned are a copy the caller owns (the worker thread
 * transfers its results, which would detach a shared buffer). Only requests
 * whose key is at most `MAX_KEY_CHARS` are remembered, so a hit is cheap next
 * to the render it saves and the memo's size stays bounded
 * (`MAX_ENTRIES` x (`MAX_KEY_CHARS` + their ids)); least recently used first out (a hit moves an
 * entry to the new end only once it has aged into the older half, so an entry hit stays for at least
 * half the memo's worth of new entries).
 */
import type { PreprocessTask } from './protocol.js';

const MAX_ENTRIES = 1024;
const MAX_KEY_CHARS = 8192;

type ChatTask = Extract<PreprocessTask, { kind: 'chat' }>;

/** Characters of the messages' string contents and text parts (a lower bound on their JSON's length). */
function contentChars(messages: readonly unknown[]): number {
  let n = 0;
  for (const m of messages) {
    const content = (m as { content?: unknown } | null)?.content;
    if (typeof content === 'string') n += content.length;
    else if (Array.isArray(content))
      for (const part of content) {
        const text = (part as { text?: unknown } | null)?.text;
        if (typeof text === 'string') n += text.length;
      }
    if (n > MAX_KEY_CHARS) return n;
  }
  return n;
}

export class PromptMemo {
  /** Ids by key, oldest first; each with the `#clock` at which it was last put at the new end. */
  readonly #entries = new Map<string, { ids: Uint32Array; at: number }>();
  #clock = 0;

  /** The memo key of a chat task, or undefined when it is too large to remember. */
  keyOf(task: ChatTask, addSpecial: boolean): string | undefined {
    // A long conversation is never remembered: its messages' text alone says so without serializing them all.
    if (contentChars(task.messages) > MAX_KEY_CHARS) return undefined;
    // JSON keeps key order, so equal keys mean equal template inputs; a reordered body is only a miss.
    const key = JSON.stringify([
      task.messages,
      task.tools ?? null,
      task.toolsJson ?? null,
      task.chatTemplateKwargs ?? null,
      task.addGenerationPrompt ?? null,
      task.continueFinalMessage ?? null,
      addSpecial,
    ]);
    return key.length <= MAX_KEY_CHARS ? key : undefined;
  }

  /**
   * A copy of the remembered ids, refreshed as most recently used. An entry among the newer half is left
   * where it is (it is not next out): a prompt sent again and again does not reorder the map each time.
   */
  get(key: string): Uint32Array | undefined {
    const entry = this.#entries.get(key);
    if (entry === undefined) return undefined;
    if (this.#clock - entry.at >= MAX_ENTRIES / 2) {
      this.#entries.delete(key);
      entry.at = ++this.#clock;
      this.#entries.set(key, entry);
    }
    return entry.ids.slice();
  }

  set(key: string, ids: Uint32Array): void {
    this.#entries.delete(key);
    this.#entries.set(key, { ids: ids.slice(), at: ++this.#clock });
    if (this.#entries.size > MAX_ENTRIES) this.#entries.delete(this.#entries.keys().next().value!);
  }
}
