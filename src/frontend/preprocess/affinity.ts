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
 *
 * A prompt of token ids keeps nothing on its thread (nothing is rendered or
 * tokenized), and an agent's ids begin with its app's system prompt, the same
 * for all its sessions: keyed by their first ids, every session of one app
 * would queue on one thread. So ids are keyed by their last ones (a body's
 * last bytes), which differ from request to request.
 */
import { skipJsonSpace } from '../../common/index.js';
import type { PreprocessTask } from './protocol.js';

const KEY_CHARS = 512;
const USER = Buffer.from('"user"');
const PROMPT = Buffer.from('"prompt"');
const OPEN_BRACKET = 0x5b;
const COLON = 0x3a;

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
    for (let i = Math.max(0, ids.length - KEY_CHARS); i < ids.length; i++) h = Math.imul(h ^ ids[i]!, 0x01000193);
    return h >>> 0;
  }
  if (task.kind === 'text') return hashChars(task.prompt, 0);
  const first = task.messages.find((m) => (m as { role?: unknown } | null)?.role === 'user') ?? task.messages[0];
  const content = (first as { content?: unknown } | null)?.content;
  return typeof content === 'string' ? hashChars(content, 0) : hashChars(JSON.stringify(content ?? null), 0);
}

/**
 * A body's conversation hash: from the bytes after its first `"user"` role; with none, from its last bytes when its
 * `"prompt"` is an array of numbers (token ids), else from the bytes after its `"prompt"` (or its first bytes).
 */
export function bodyAffinity(bytes: Uint8Array): number {
  const buf = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const user = userRole(buf);
  if (user >= 0) return hashBytes(buf, user + USER.length);
  const prompt = buf.indexOf(PROMPT);
  if (prompt < 0) return hashBytes(buf, 0);
  // The member's value: past the colon and the JSON white space around it.
  let value = skipJsonSpace(buf, prompt + PROMPT.length);
  if (buf[value] === COLON) value = skipJsonSpace(buf, value + 1);
  // An array whose first element is a number: token ids (an array of strings is text, kept by its first bytes).
  const first = buf[skipJsonSpace(buf, value + 1)];
  const ids = buf[value] === OPEN_BRACKET && first !== undefined && first >= 0x30 && first <= 0x39;
  return hashBytes(buf, ids ? Math.max(value, buf.length - KEY_CHARS) : value);
}

/**
 * The first `"user"` that is a value (a message's role), not a key: OpenAI's `user` field (`"user": "alice"`), which
 * may come before the messages, would key every session of one user alike. -1 when there is none.
 */
function userRole(buf: Buffer): number {
  for (let at = buf.indexOf(USER); at >= 0; at = buf.indexOf(USER, at + USER.length))
    if (buf[skipJsonSpace(buf, at + USER.length)] !== COLON) return at;
  return -1;
}

/** FNV-1a over at most KEY_CHARS bytes of `buf` from `from`. */
function hashBytes(buf: Buffer, from: number): number {
  let h = 0x811c9dc5;
  const end = Math.min(buf.length, from + KEY_CHARS);
  for (let i = from; i < end; i++) h = Math.imul(h ^ buf[i]!, 0x01000193);
  return h >>> 0;
}
