/**
 * System messages inside a Messages request's `messages` (Claude Code 2.1.154 and later sends them, and `ctx` and
 * `msg` roles), placed as vLLM's Messages front end places them before it renders the chat, so that kvgate routes
 * on the tokens the engine computes. Anthropic's API takes them; a gateway that refused them refused every turn of
 * those clients.
 *
 * vLLM's rules (its `normalize_inline_system`):
 * - `ctx` and `msg` are user messages.
 * - System messages at the head of `messages` join the system prompt (their texts joined with "\n\n").
 * - A system message between an assistant's `tool_use` and the user message holding its results moves after that
 *   message: nothing may come between a tool call and its results.
 * - The others stay as system turns (`preserve`), where the request has a system prompt; or their text is folded
 *   into a neighbouring user message (`fold`): appended to the user message before them (to its last tool result
 *   when it holds only results), else prepended to the user message after them, else a user message of its own.
 *   vLLM picks the mode once per model by rendering probe conversations (a template that marks a system turn
 *   apart keeps them); both only ever change the end of a conversation, so a turn renders as an extension of the
 *   previous one.
 * - Claude Code's `x-anthropic-billing-header` text (a per-request hash) is dropped, as in the system prompt.
 */
import { type Json, invalidField, isObject } from './agent-convert.js';

/** How inline system messages are placed: kept as system turns, or folded into user messages (vLLM's names). */
export const INLINE_SYSTEM_MODES = ['preserve', 'fold'] as const;
export type InlineSystemMode = (typeof INLINE_SYSTEM_MODES)[number];
/** What a model's `anthropic_inline_system` may say: a mode, or `auto` (settled by inline-system-probe.ts). */
export const INLINE_SYSTEM_OPTIONS = ['auto', ...INLINE_SYSTEM_MODES] as const;
export type InlineSystemOption = (typeof INLINE_SYSTEM_OPTIONS)[number];

/** A message of the request, normalized, with the index it had in `messages` (for error params). */
export interface PlacedMessage {
  readonly message: Json;
  readonly index: number;
}

/** Claude Code's per-request attribution line, dropped from system text: it would defeat prefix caching. */
const BILLING_HEADER = 'x-anthropic-billing-header';
const SEPARATOR = '\n\n';

function join(...texts: string[]): string {
  return texts.filter((t) => t !== '').join(SEPARATOR);
}

/** A system message's text: a string as it is, or its text blocks joined with no separator; the billing header dropped. */
export function systemText(content: unknown, param: string): string {
  if (typeof content === 'string') return content.startsWith(BILLING_HEADER) ? '' : content;
  if (!Array.isArray(content)) throw invalidField(param, 'must be a string or a list of content blocks');
  let text = '';
  for (const block of content) {
    if (!isObject(block) || block.type !== 'text' || typeof block.text !== 'string') continue;
    if (!block.text.startsWith(BILLING_HEADER)) text += block.text;
  }
  return text;
}

/** `content` (a string or a list of blocks) with `text` joined onto its text at one end, never a new turn. */
function addText(content: unknown, text: string, atEnd: boolean): unknown {
  if (content === undefined || content === null || typeof content === 'string') {
    const own = typeof content === 'string' ? content : '';
    return atEnd ? join(own, text) : join(text, own);
  }
  if (!Array.isArray(content)) return content;
  const items = [...(content as unknown[])];
  const at = atEnd ? items.length - 1 : 0;
  const edge = items[at];
  // Merged into an adjacent text block: some templates concatenate text blocks with no separator.
  if (isObject(edge) && edge.type === 'text' && (edge.text === undefined || typeof edge.text === 'string')) {
    const old = typeof edge.text === 'string' ? edge.text : '';
    items[at] = { ...edge, text: atEnd ? join(old, text) : join(text, old) };
  } else if (atEnd) items.push({ type: 'text', text });
  else items.unshift({ type: 'text', text });
  return items;
}

/** Appends `text` to a user message: to its own text, or to its last tool result when it holds only results. */
function appendToUser(message: Json, text: string): Json {
  const blocks = message.content;
  if (!Array.isArray(blocks)) return { ...message, content: addText(blocks, text, true) };
  const isResult = (b: unknown): boolean => isObject(b) && b.type === 'tool_result';
  if (blocks.length > 0 && blocks.every(isResult)) {
    const last = blocks[blocks.length - 1] as Json;
    return { ...message, content: [...blocks.slice(0, -1), { ...last, content: addText(last.content, text, true) }] };
  }
  const own = addText(
    blocks.filter((b) => !isResult(b)),
    text,
    true,
  ) as unknown[];
  return { ...message, content: [...blocks.filter(isResult), ...own] };
}

/** System messages between an assistant's `tool_use` and the next user message, moved after that message. */
function outOfToolRuns(messages: readonly PlacedMessage[]): PlacedMessage[] {
  const out: PlacedMessage[] = [];
  const held: PlacedMessage[] = [];
  let awaitingResults = false;
  for (const m of messages) {
    const role = m.message.role;
    if (role === 'system') {
      (awaitingResults ? held : out).push(m);
      continue;
    }
    if (role === 'assistant') out.push(...held.splice(0));
    out.push(m);
    if (role === 'user') out.push(...held.splice(0));
    const content = m.message.content;
    awaitingResults =
      role === 'assistant' && Array.isArray(content) && content.some((b) => isObject(b) && b.type === 'tool_use');
  }
  out.push(...held);
  return out;
}

/** The messages with their inline system messages folded into user messages (see the file comment). */
function fold(messages: readonly PlacedMessage[]): PlacedMessage[] {
  const out: PlacedMessage[] = [];
  const pending: string[] = [];
  let pendingAt = 0;
  for (const m of messages) {
    if (m.message.role === 'system') {
      const text = systemText(m.message.content, `messages[${m.index}].content`);
      if (text === '') continue;
      const last = out[out.length - 1];
      if (last !== undefined && last.message.role === 'user' && pending.length === 0) {
        out[out.length - 1] = { message: appendToUser(last.message, text), index: last.index };
      } else {
        if (pending.length === 0) pendingAt = m.index;
        pending.push(text);
      }
      continue;
    }
    if (pending.length > 0) {
      const text = join(...pending.splice(0));
      if (m.message.role === 'user') {
        out.push({ message: { ...m.message, content: addText(m.message.content, text, false) }, index: m.index });
        continue;
      }
      out.push({ message: { role: 'user', content: text }, index: pendingAt });
    }
    out.push(m);
  }
  if (pending.length > 0) out.push({ message: { role: 'user', content: join(...pending) }, index: pendingAt });
  return out;
}

/**
 * The request's messages as vLLM renders them (see the file comment), and the text the system messages at their
 * head add to the system prompt (`systemPrompt`: the prompt's own text, without the billing header). A role other
 * than user, assistant, system, ctx and msg is left for the conversion to refuse.
 * @throws KvgateError KVG_ERR_INVALID_REQUEST: a message that is not an object, or a system message whose content
 *   is neither a string nor a list.
 */
export function placeInlineSystem(
  messages: readonly unknown[],
  systemPrompt: string,
  mode: InlineSystemMode,
): { readonly leading: string; readonly messages: PlacedMessage[] } {
  const placed: PlacedMessage[] = messages.map((message, index) => {
    if (!isObject(message)) throw invalidField(`messages[${index}]`, 'must be an object');
    const role = message.role;
    return { message: role === 'ctx' || role === 'msg' ? { ...message, role: 'user' } : message, index };
  });
  if (!placed.some((m) => m.message.role === 'system')) return { leading: '', messages: placed };
  let head = 0;
  while (head < placed.length && placed[head]!.message.role === 'system') head++;
  const leading = join(
    ...placed.slice(0, head).map((m) => systemText(m.message.content, `messages[${m.index}].content`)),
  );
  const rest = outOfToolRuns(placed.slice(head));
  // Without a system prompt, preserving would make a late system message the template's first one, where some
  // render the request's tools (DeepSeek V4): vLLM folds then too.
  if (mode === 'preserve' && (systemPrompt !== '' || leading !== '')) return { leading, messages: rest };
  return { leading, messages: fold(rest) };
}
