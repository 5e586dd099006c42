/**
 * `anthropic_inline_system: auto`: which placement of a Messages request's inline system messages
 * (inline-system.ts) a model's engine uses, settled as vLLM settles its own `auto`: by rendering probe
 * conversations with the model's chat template and tokenizer. A system message inserted into a conversation is
 * kept in place (`preserve`) only where the template renders it as a turn of its own: the render succeeds, keeps
 * its text, changes nothing else of the prompt (the new ids are the old ones with one run inserted, and not after
 * the generation prompt), holds its text once and a special token (a role marker) in that run, differs from the
 * same text sent as a user message, and keeps the same earlier reasoning. Anything else folds (`fold`), as does a
 * template that renders none of the probe conversations.
 *
 * The probe conversations: a system prompt and a user message, then (1) an answer and a second user message with
 * the system message before the second, (2) an assistant's reasoning and tool call and the tool's result with the
 * system message after the result, (3) the system message at the end. Each is rendered with a tool declared,
 * once with a reasoning effort set (as agents send it) and once without; a template that refuses reasoning in
 * history is probed without it.
 */
import type { InlineSystemMode } from './inline-system.js';

/** What the probe needs of a model's preprocessing: its chat render, its tokenizer and its special token ids. */
export interface InlineSystemRenderer {
  /** The chat's prompt text, rendered with `tools` and the template variables of `reasoningEffort`; throws when the template refuses it. */
  render(messages: readonly Record<string, unknown>[], tools: readonly unknown[], reasoningEffort?: string): string;
  encode(text: string): Promise<number[]>;
  decode(ids: readonly number[]): Promise<string>;
  /** The tokenizer's special and added tokens (role markers are among them). */
  readonly specialIds: ReadonlySet<number>;
}

export interface InlineSystemVerdict {
  readonly mode: InlineSystemMode;
  /** Why, for the log line. */
  readonly reason: string;
}

// Each text starts and ends with a word of its own, so the run found by comparing renders starts at the message.
const SYSTEM = 'Quartz standing orders';
const FIRST = 'Juniper opening request';
const ANSWER = 'Saffron first reply';
const SECOND = 'Marble follow up';
const INLINE = 'Walnut inline reminder';
const REASONING = 'Cobalt earlier thinking';
const CALL_ID = 'probe-call-1';
const TOOL = {
  type: 'function',
  function: { name: 'probe_tool', description: 'A probe.', parameters: { type: 'object', properties: {} } },
};

interface Case {
  readonly name: string;
  readonly messages: readonly Record<string, unknown>[];
  /** Where the system message goes. */
  readonly at: number;
  /** Whether the same text sent as a user message must render differently (between turns, where both can go). */
  readonly againstUser?: true;
}

const HEAD = [
  { role: 'system', content: SYSTEM },
  { role: 'user', content: FIRST },
];
const CASES: readonly Case[] = [
  {
    name: 'between turns',
    messages: [...HEAD, { role: 'assistant', content: ANSWER }, { role: 'user', content: SECOND }],
    at: 3,
    againstUser: true,
  },
  {
    name: 'after a tool result',
    messages: [
      ...HEAD,
      {
        role: 'assistant',
        content: null,
        reasoning: REASONING,
        tool_calls: [{ id: CALL_ID, type: 'function', function: { name: 'probe_tool', arguments: '{}' } }],
      },
      { role: 'tool', tool_call_id: CALL_ID, content: 'Lilac tool output' },
    ],
    at: 4,
  },
  { name: 'at the end', messages: HEAD, at: 2 },
];

/** `[p, run]` when `after` is `before` with `run` inserted at `p`, else undefined. */
function insertion(before: readonly number[], after: readonly number[]): [number, number[]] | undefined {
  const n = Math.min(before.length, after.length);
  let p = 0;
  while (p < n && before[p] === after[p]) p++;
  let s = 0;
  while (s < n - p && before[before.length - 1 - s] === after[after.length - 1 - s]) s++;
  if (p + s !== before.length) return undefined;
  return [p, after.slice(p, after.length - s)];
}

const withoutReasoning = (messages: readonly Record<string, unknown>[]): Record<string, unknown>[] =>
  messages.map(({ reasoning: _drop, ...rest }) => rest);

/** Settles `auto` for one model (module comment). Never throws: a probe that fails folds, with the failure as reason. */
export async function probeInlineSystem(r: InlineSystemRenderer): Promise<InlineSystemVerdict> {
  try {
    return await probe(r);
  } catch (err) {
    return { mode: 'fold', reason: `the probe failed: ${(err as Error).message}` };
  }
}

async function probe(r: InlineSystemRenderer): Promise<InlineSystemVerdict> {
  const ids = async (messages: readonly Record<string, unknown>[], effort: string | undefined) => {
    let text: string;
    try {
      text = r.render(messages, [TOOL], effort);
    } catch {
      return undefined;
    }
    return r.encode(text);
  };
  let probed: string | undefined;
  for (const effort of ['high', undefined]) {
    const cases: { c: Case; base: number[] }[] = [];
    for (const c of CASES) {
      let messages = c.messages;
      let base = await ids(messages, effort);
      if (base === undefined && messages.some((m) => 'reasoning' in m)) {
        messages = withoutReasoning(messages);
        base = await ids(messages, effort);
      }
      if (base === undefined) break;
      cases.push({ c: { ...c, messages }, base });
    }
    if (cases.length !== CASES.length) continue;
    const key = JSON.stringify(cases.map((x) => x.base));
    if (key === probed) continue;
    probed = key;
    for (const { c, base } of cases) {
      const why = await unsafe(r, c, base, (m) => ids(m, effort));
      if (why !== undefined)
        return { mode: 'fold', reason: `${c.name}: ${why} (reasoning effort ${effort ?? 'unset'})` };
    }
  }
  if (probed === undefined) return { mode: 'fold', reason: 'the probe conversations could not be rendered' };
  return { mode: 'preserve', reason: 'the chat template renders them as system turns of their own' };
}

/** Why a system message at `c.at` is not safe to keep in place, or undefined when it is. */
async function unsafe(
  r: InlineSystemRenderer,
  c: Case,
  base: number[],
  ids: (messages: readonly Record<string, unknown>[]) => Promise<number[] | undefined>,
): Promise<string | undefined> {
  const inserted = (message: Record<string, unknown>): Record<string, unknown>[] => [
    ...c.messages.slice(0, c.at),
    message,
    ...c.messages.slice(c.at),
  ];
  const withSystem = await ids(inserted({ role: 'system', content: INLINE }));
  if (withSystem === undefined) return 'the template refuses it';
  const text = await r.decode(withSystem);
  if (!text.includes(INLINE)) return 'the template drops it';
  const found = insertion(base, withSystem);
  if (found === undefined) return 'rendering it changes other parts of the prompt';
  const [at, run] = found;
  if (c.at === c.messages.length && at >= base.length) return 'it lands after the generation prompt';
  if ((await r.decode(run)).split(INLINE).length !== 2) return 'it is not rendered as a run of its own';
  if (!run.some((id) => r.specialIds.has(id))) return 'it has no role marker';
  if (c.againstUser === true) {
    const asUser = await ids(inserted({ role: 'user', content: INLINE }));
    const userRun = asUser === undefined ? undefined : insertion(base, asUser)?.[1];
    if (userRun !== undefined && userRun.length === run.length && userRun.every((id, i) => id === run[i]))
      return 'it renders as a user message would';
  }
  if ((await r.decode(base)).includes(REASONING) !== text.includes(REASONING))
    return 'it changes which earlier reasoning is kept';
  return undefined;
}
