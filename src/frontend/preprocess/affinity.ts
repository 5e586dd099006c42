/**
 * Which pool thread a prompt goes to: a conversation's turns to the same one,
 * so its conversation cache (conversation-cache.ts), which lives on the
 * thread that preprocessed its last turn, is there for the next. The key is
 * cheap and reads a bounded part of the request: the first user message's
 * first characters (a chat task), a text prompt's first characters, or the
 * bytes after the first `"user"` of a body parsed on a thread (the first user
 * message in a chat body; whatever follows the first such bytes otherwise).
 * Distinct conversations spread over the threads by hash; a conversation
 * whose body grows past the size parsed on a thread moves once.
 */
import type { PreprocessTask } from './protocol.js';

const KEY_CHARS = 512;
const USER = Buffer.from('"user"');

/** FNV-1a over at most KEY_CHARS code units of `s` from `from`. */
function hashChars(s: string, from: number): number {
  let h = 0x811c9dc5;
  const end = Math.min(s.length, from + KEY_CHARS);
  for (let i = from; i < end; i++) h = Math.imul(h ^ s.charCodeAt(i), 0x01000193);
  return h >>> 0;
}

/** A task's conversation hash (the same for every turn of one conversation). */
export function taskAffinity(task: PreprocessTask): number {
  if (task.kind === 'tokens') {
    let h = 0x811c9dc5;
    const ids = task.tokenIds;
    for (let i = 0; i < ids.length && i < KEY_CHARS; i++) h = Math.imul(h ^ ids[i]!, 0x01000193);
    return h >>> 0;
  }
  if (task.kind === 'text') return hashChars(task.prompt, 0);
  const first = task.messages.find((m) => (m as { role?: unknown } | null)?.role === 'user') ?? task.messages[0];
  const content = (first as { content?: unknown } | null)?.content;
  return typeof content === 'string' ? hashChars(content, 0) : hashChars(JSON.stringify(content ?? null), 0);
}

/** A body's conversation hash, from the bytes after its first `"user"` (or its first bytes). */
export function bodyAffinity(bytes: Uint8Array): number {
  const buf = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const at = buf.indexOf(USER);
  const from = at < 0 ? 0 : at + USER.length;
  let h = 0x811c9dc5;
  const end = Math.min(buf.length, from + KEY_CHARS);
  for (let i = from; i < end; i++) h = Math.imul(h ^ buf[i]!, 0x01000193);
  return h >>> 0;
}
