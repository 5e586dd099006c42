/**
 * Builds the non-streaming OpenAI answer (`chat.completion` or
 * `text_completion`) from the chunks of a stream, so kvgate can stream every
 * engine leg (the router sees the first token when it happens) and still
 * answer a client that asked for `stream: false`. Pure: chunks in (parsed
 * JSON, in order), one response object out.
 *
 * Merge rules, per choice `index`:
 * - completion `text`, chat `delta.content`, `delta.reasoning_content`,
 *   `delta.reasoning` and `delta.refusal` are concatenated (content stays null
 *   when no chunk carried any, or when the answer is only tool calls);
 * - `delta.tool_calls` are merged by their own `index`: `id`, `type` taken when
 *   present, `function.name` and `function.arguments` concatenated;
 * - logprobs: chat `content` / `refusal` lists and the completion lists
 *   (`text_offset`, `token_logprobs`, `tokens`, `top_logprobs`) concatenated;
 *   null when no chunk carried any;
 * - `finish_reason` and any other choice field (`stop_reason`, ...): the last
 *   non-null value; an array field (`token_ids`) is concatenated.
 * Top level: `usage` from the last chunk that has one (the `include_usage`
 * chunk); every other field (`id`, `created`, `model`, `system_fingerprint`,
 * engine extras) from the chunks, a later non-null value winning; `object`
 * becomes the non-streaming one.
 */

type Json = Record<string, unknown>;

function obj(v: unknown): Json | undefined {
  return typeof v === 'object' && v !== null && !Array.isArray(v) ? (v as Json) : undefined;
}

interface ToolCallAcc {
  id: unknown;
  type: unknown;
  name: string | undefined;
  args: string;
  /** Fields beyond id/type/function, taken as they come. */
  extra: Json;
}

interface ChoiceAcc {
  index: number;
  role: unknown;
  text: string;
  sawContent: boolean;
  /** Concatenated string fields of the delta other than content (reasoning, refusal). */
  /** Created on first use (most answers carry neither). */
  strings: Map<string, string> | undefined;
  tools: Map<number, ToolCallAcc> | undefined;
  logprobs: Map<string, unknown[]> | undefined;
  finishReason: unknown;
  extra: Json;
}

const CHOICE_KEYS = new Set(['index', 'delta', 'message', 'text', 'logprobs', 'finish_reason']);
const DELTA_STRINGS = ['reasoning_content', 'reasoning', 'refusal'];
const OBJECT_OF: Record<string, string> = {
  'chat.completion.chunk': 'chat.completion',
  text_completion: 'text_completion',
};

export class ResponseAssembler {
  readonly #top: Json = {};
  readonly #choices = new Map<number, ChoiceAcc>();
  #usage: unknown = undefined;
  #chat = false;
  #held = 0;

  /**
   * About what the answer so far holds: the strings it concatenated, 8 bytes per element of an array field it
   * concatenated (`token_ids`), and the raw size of each chunk with logprobs (they are most of such a chunk).
   * The top level and the other choice fields are replaced, not accumulated.
   */
  get heldBytes(): number {
    return this.#held;
  }

  /**
   * Adds one parsed chunk of the stream (not `[DONE]`), `rawBytes` its size on the wire (for `heldBytes`).
   * Tolerant: fields of the wrong type are skipped.
   */
  push(chunk: unknown, rawBytes = 0): void {
    const c = obj(chunk);
    if (c === undefined) return;
    for (const k in c) {
      const v = c[k];
      if (k === 'choices' || k === 'usage' || v === null || v === undefined) continue;
      if (k === 'object' && typeof v === 'string') {
        if (v === 'chat.completion.chunk') this.#chat = true;
        this.#top[k] = OBJECT_OF[v] ?? v;
      } else {
        this.#top[k] = v;
      }
    }
    if (c['usage'] !== undefined && c['usage'] !== null) this.#usage = c['usage'];
    if (!Array.isArray(c['choices'])) return;
    for (const raw of c['choices']) {
      const ch = obj(raw);
      if (ch !== undefined) this.#held += this.#pushChoice(ch, rawBytes);
    }
  }

  /** The non-streaming response the chunks so far add up to. */
  result(): Json {
    const out: Json = { ...this.#top };
    out['object'] ??= this.#chat ? 'chat.completion' : 'text_completion';
    const chat = out['object'] === 'chat.completion';
    // Most answers have one choice: no array to sort.
    const accs =
      this.#choices.size === 1
        ? [this.#choices.values().next().value!]
        : [...this.#choices.values()].sort((a, b) => a.index - b.index);
    out['choices'] = accs.map((a) => (chat ? chatChoice(a) : completionChoice(a)));
    if (this.#usage !== undefined) out['usage'] = this.#usage;
    return out;
  }

  /** Merges one choice of a chunk of `rawBytes`; returns what it added to the answer (`heldBytes`). */
  #pushChoice(ch: Json, rawBytes: number): number {
    const index = typeof ch['index'] === 'number' ? ch['index'] : 0;
    let a = this.#choices.get(index);
    if (a === undefined) {
      a = {
        index,
        role: undefined,
        text: '',
        sawContent: false,
        strings: undefined,
        tools: undefined,
        logprobs: undefined,
        finishReason: null,
        extra: {},
      };
      this.#choices.set(index, a);
    }
    let held = 0;
    if (typeof ch['text'] === 'string') {
      a.text += ch['text'];
      a.sawContent = true;
      held += ch['text'].length;
    }
    const delta = obj(ch['delta']);
    if (delta !== undefined) held += pushDelta(a, delta);
    const lp = obj(ch['logprobs']);
    if (lp !== undefined) {
      pushLogprobs(a, lp);
      held += rawBytes;
    }
    if (ch['finish_reason'] !== null && ch['finish_reason'] !== undefined) a.finishReason = ch['finish_reason'];
    for (const k in ch) {
      const v = ch[k];
      if (CHOICE_KEYS.has(k) || v === null || v === undefined) continue;
      const prev = a.extra[k];
      // An array field (vLLM's `token_ids` with `return_token_ids`) grows in place: a copy per chunk was quadratic
      // (40,000 one-token chunks took 12 s of the event loop). The first is copied, so the list is the choice's own.
      if (Array.isArray(v) && Array.isArray(prev)) prev.push(...(v as unknown[]));
      else a.extra[k] = Array.isArray(v) ? [...(v as unknown[])] : v;
      if (Array.isArray(v)) held += v.length * 8;
    }
    return held;
  }
}

/** Merges a chat delta; returns the length of the strings it concatenated. */
function pushDelta(a: ChoiceAcc, d: Json): number {
  let held = 0;
  if (d['role'] !== undefined && d['role'] !== null) a.role = d['role'];
  if (typeof d['content'] === 'string') {
    a.text += d['content'];
    a.sawContent = true;
    held += d['content'].length;
  }
  for (const k of DELTA_STRINGS) {
    if (typeof d[k] === 'string') {
      a.strings ??= new Map();
      a.strings.set(k, (a.strings.get(k) ?? '') + (d[k] as string));
      held += (d[k] as string).length;
    }
  }
  if (!Array.isArray(d['tool_calls'])) return held;
  a.tools ??= new Map();
  for (const raw of d['tool_calls']) {
    const t = obj(raw);
    if (t === undefined) continue;
    const i = typeof t['index'] === 'number' ? t['index'] : a.tools.size;
    let acc = a.tools.get(i);
    if (acc === undefined)
      a.tools.set(i, (acc = { id: undefined, type: undefined, name: undefined, args: '', extra: {} }));
    if (t['id'] !== undefined && t['id'] !== null) acc.id = t['id'];
    if (t['type'] !== undefined && t['type'] !== null) acc.type = t['type'];
    const fn = obj(t['function']);
    if (typeof fn?.['name'] === 'string') {
      acc.name = (acc.name ?? '') + fn['name'];
      held += fn['name'].length;
    }
    if (typeof fn?.['arguments'] === 'string') {
      acc.args += fn['arguments'];
      held += fn['arguments'].length;
    }
    for (const [k, v] of Object.entries(t))
      if (k !== 'index' && k !== 'id' && k !== 'type' && k !== 'function' && v !== null) acc.extra[k] = v;
  }
  return held;
}

function pushLogprobs(a: ChoiceAcc, lp: Json): void {
  a.logprobs ??= new Map();
  for (const [k, v] of Object.entries(lp)) {
    if (!Array.isArray(v)) continue;
    const list = a.logprobs.get(k);
    if (list === undefined) a.logprobs.set(k, [...v]);
    else list.push(...v);
  }
}

function logprobsOf(a: ChoiceAcc): Json | null {
  return a.logprobs === undefined ? null : Object.fromEntries(a.logprobs);
}

/** A choice's own fields after what the chunks carried beyond the known ones (none, mostly: no copy then). */
function choiceOf(a: ChoiceAcc, own: Json): Json {
  for (const _k in a.extra) return { ...a.extra, ...own };
  return own;
}

function chatChoice(a: ChoiceAcc): Json {
  const toolCalls =
    a.tools === undefined
      ? []
      : [...a.tools.entries()]
          .sort((x, y) => x[0] - y[0])
          .map(([, t]) => ({
            ...t.extra,
            ...(t.id !== undefined ? { id: t.id } : {}),
            type: t.type ?? 'function',
            function: { name: t.name ?? '', arguments: t.args },
          }));
  const message: Json = {
    role: a.role ?? 'assistant',
    content: a.sawContent && !(a.text === '' && toolCalls.length > 0) ? a.text : null,
  };
  if (a.strings !== undefined) for (const [k, v] of a.strings) message[k] = v;
  if (toolCalls.length > 0) message['tool_calls'] = toolCalls;
  return choiceOf(a, { index: a.index, message, logprobs: logprobsOf(a), finish_reason: a.finishReason });
}

function completionChoice(a: ChoiceAcc): Json {
  return choiceOf(a, { index: a.index, text: a.text, logprobs: logprobsOf(a), finish_reason: a.finishReason });
}
