/**
 * The pure half of request migration: which requests may be resumed
 * mid-stream, what the resumed request is, and how its chunks are shown to
 * the client so that the answer reads as one stream.
 *
 * A resumed request is the original prompt's token ids followed by the tokens
 * generated so far, sent to `/v1/completions` (token-id prompts are what both
 * vLLM and SGLang take; a chat's templated prompt comes back from the engine as
 * `prompt_token_ids`), with `max_tokens` reduced by what was generated. Its
 * chunks are rewritten into the original stream's shape (id, object, created,
 * model; chat `delta.content` for a chat) and its usage counted over the whole
 * answer. The engine fields kvgate asked for (`token_ids`, `prompt_token_ids`)
 * are removed unless the client asked for them itself.
 */

const AGENT_PATHS = new Set(['/v1/messages', '/v1/responses']);

/**
 * Whether a leg on `path` streams the agent APIs' event sequences (Anthropic Messages, OpenAI Responses), which
 * are never migrated: a continuation's chunks are rewritten into an OpenAI stream's shape, not into those.
 */
export function isAgentPath(path: string): boolean {
  return AGENT_PATHS.has(path);
}

/** What a client's body asks for that a continuation from token ids could not honour. */
export type MigrationBlocker = 'guided' | 'tools' | 'n' | 'logprobs' | 'echo';

function obj(v: unknown): Record<string, unknown> | undefined {
  return typeof v === 'object' && v !== null && !Array.isArray(v) ? (v as Record<string, unknown>) : undefined;
}

function int(v: unknown): number | undefined {
  return typeof v === 'number' && Number.isInteger(v) ? v : undefined;
}

/**
 * Why this request cannot be resumed after its first output (undefined: it can). Guided decoding's state
 * (a grammar, a JSON schema, a required tool call) lives in the engine and would restart from scratch; n > 1
 * streams several choices; logprobs and echo describe positions the continuation renumbers.
 */
export function midStreamBlocker(body: Readonly<Record<string, unknown>>): MigrationBlocker | undefined {
  const rf = obj(body['response_format']);
  if (rf !== undefined && rf['type'] !== 'text') return 'guided';
  if (Object.keys(body).some((k) => k.startsWith('guided_') || k === 'structured_outputs')) return 'guided';
  // The engine parses tool calls out of a chat's output; a continuation is a plain completion.
  if (Array.isArray(body['tools']) && body['tools'].length > 0 && body['tool_choice'] !== 'none') return 'tools';
  if ((int(body['n']) ?? 1) > 1 || (int(body['best_of']) ?? 1) > 1) return 'n';
  if (body['logprobs'] !== undefined && body['logprobs'] !== null && body['logprobs'] !== false) return 'logprobs';
  if (body['echo'] === true) return 'echo';
  return undefined;
}

/** Chat-only fields a completion continuation must not carry (the prompt is already templated). */
const CHAT_ONLY = [
  'messages',
  'tools',
  'tool_choice',
  'parallel_tool_calls',
  'response_format',
  'chat_template',
  'chat_template_kwargs',
  'add_generation_prompt',
  'continue_final_message',
  'documents',
  'max_completion_tokens',
  'logprobs',
  'top_logprobs',
  'reasoning_effort',
  'mm_processor_kwargs',
  'return_token_ids',
];

const COMPLETIONS = '/v1/completions';

/**
 * The request that resumes `body` after `generated` tokens: a completion whose prompt is the prompt's ids and
 * the generated ones, asking for what is left of `max_tokens` (and of `min_tokens`). Undefined when nothing
 * is left to generate.
 */
export function continuationRequest(
  path: string,
  body: Readonly<Record<string, unknown>>,
  promptIds: readonly number[],
  generated: readonly number[],
): { path: string; body: Record<string, unknown> } | undefined {
  const chat = path !== COMPLETIONS;
  const out: Record<string, unknown> = { ...body };
  if (chat) for (const k of CHAT_ONLY) delete out[k];
  delete out['return_token_ids'];
  out['prompt'] = [...promptIds, ...generated];
  const max = int(chat ? (body['max_completion_tokens'] ?? body['max_tokens']) : body['max_tokens']);
  if (max !== undefined) {
    if (max - generated.length <= 0) return undefined;
    out['max_tokens'] = max - generated.length;
  }
  for (const k of ['min_tokens', 'min_completion_tokens']) {
    const min = int(body[k]);
    if (min !== undefined) out[k] = Math.max(0, min - generated.length);
  }
  return { path: COMPLETIONS, body: out };
}

/** The original stream's identity, copied onto every chunk of a continuation. */
interface StreamShape {
  readonly id: unknown;
  readonly object: unknown;
  readonly created: unknown;
  readonly model: unknown;
}

/**
 * Follows one client answer across its legs: the prompt's ids and the tokens generated so far (from the
 * engine's `token_ids`), whether the answer finished, and the chunks as the client sees them.
 */
export class StreamProgress {
  /** The client asked for the engine's token ids itself: its chunks keep them. */
  readonly keepsIds: boolean;
  readonly generated: number[] = [];
  /** Every output chunk carried its `token_ids` (else a continuation would lose or repeat tokens). */
  tokenIdsComplete = true;
  /** A `finish_reason` was seen: the answer is whole. */
  finished = false;
  /** `[DONE]` was passed on. */
  done = false;
  /** Something reached the client. */
  forwarded = false;
  /** Legs started after the first (migrations that were dispatched). */
  resumed = 0;
  readonly #chat: boolean;
  /** The prompt's ids as the first leg's first chunk had them: parsed (`promptIds`) only when a migration reads them. */
  #promptIds: unknown;
  #promptIdsText: string | undefined;
  #shape: StreamShape | undefined;
  /** Generated tokens before the current leg. */
  #offset = 0;
  #continuation = false;

  constructor(path: string, clientBody: Readonly<Record<string, unknown>>) {
    this.#chat = path !== COMPLETIONS;
    this.keepsIds = clientBody['return_token_ids'] === true;
  }

  /** The prompt's token ids, from the first leg's first chunk; undefined when it had none (or not an array). */
  get promptIds(): number[] | undefined {
    if (this.#promptIdsText !== undefined) {
      try {
        this.#promptIds = JSON.parse(this.#promptIdsText);
      } catch {
        this.#promptIds = undefined;
      }
      this.#promptIdsText = undefined;
    }
    return Array.isArray(this.#promptIds) ? (this.#promptIds as number[]) : undefined;
  }

  /** A new leg starts; a continuation's chunks are reshaped from here on. */
  startLeg(continuation: boolean): void {
    this.#offset = this.generated.length;
    this.#continuation = continuation;
    if (continuation) this.resumed++;
  }

  /**
   * Whether a plain chunk of the current leg (engines' `isPlainChunk`: an earlier chunk of the leg's stream with
   * another non-empty text and no token ids) passes to the client as it is, recording nothing: outside a
   * continuation, `clientChunk` would record nothing new for it and hand it back unchanged.
   */
  passesPlain(): boolean {
    return !this.#continuation;
  }

  /**
   * One parsed chunk of the current leg, as the client should see it: the same object when nothing changes,
   * a rewritten one, or undefined to drop it (an empty continuation chunk).
   */
  clientChunk(json: Record<string, unknown>, cutPromptIds?: string): Record<string, unknown> | undefined {
    this.#shape ??= { id: json['id'], object: json['object'], created: json['created'], model: json['model'] };
    const choices = Array.isArray(json['choices']) ? (json['choices'] as unknown[]) : [];
    this.#record(json, choices, cutPromptIds);
    if (this.#continuation) return this.#reshape(json, choices);
    if (this.keepsIds) return json;
    return this.#stripped(json, choices);
  }

  /**
   * `cutPromptIds`: the text of the chunk's top-level `prompt_token_ids`, cut from `json` before its parse (engines'
   * `leanChunk`), taken as the parsed member would have been: first, before a choice's.
   */
  #record(json: Record<string, unknown>, choices: readonly unknown[], cutPromptIds: string | undefined): void {
    const first = obj(choices[0]);
    if (!this.#continuation && this.#promptIds === undefined && this.#promptIdsText === undefined) {
      if (cutPromptIds !== undefined) this.#promptIdsText = cutPromptIds;
      else {
        const ids = json['prompt_token_ids'] ?? first?.['prompt_token_ids'];
        if (Array.isArray(ids)) this.#promptIds = ids;
      }
    }
    if (first === undefined) return;
    const ids = first['token_ids'];
    if (Array.isArray(ids)) this.generated.push(...(ids as number[]));
    else if (hasOutput(first)) this.tokenIdsComplete = false;
    if (typeof first['finish_reason'] === 'string') this.finished = true;
  }

  #stripped(json: Record<string, unknown>, choices: readonly unknown[]): Record<string, unknown> {
    if (
      !('prompt_token_ids' in json) &&
      !choices.some((c) => obj(c)?.['token_ids'] !== undefined || obj(c)?.['prompt_token_ids'] !== undefined)
    )
      return json;
    const out = { ...json };
    delete out['prompt_token_ids'];
    out['choices'] = choices.map((c) => {
      const choice = obj(c);
      if (choice === undefined) return c;
      const { token_ids: _t, prompt_token_ids: _p, ...rest } = choice;
      return rest;
    });
    return out;
  }

  /** A continuation's completion chunk in the original stream's shape, usage over the whole answer. */
  #reshape(json: Record<string, unknown>, choices: readonly unknown[]): Record<string, unknown> | undefined {
    const shape = this.#shape!;
    const out: Record<string, unknown> = {
      id: shape.id,
      object: shape.object,
      created: shape.created,
      model: shape.model,
    };
    out['choices'] = choices.map((c) => this.#choice(obj(c) ?? {}));
    const usage = obj(json['usage']);
    if (usage !== undefined) out['usage'] = this.#usage(usage);
    const empty = (out['choices'] as Record<string, unknown>[]).every(
      (c) => c['finish_reason'] == null && c['text'] === '' && obj(c['delta'])?.['content'] === '',
    );
    if (empty && usage === undefined && choices.length > 0) return undefined;
    return out;
  }

  #choice(c: Record<string, unknown>): Record<string, unknown> {
    const text = typeof c['text'] === 'string' ? c['text'] : '';
    const finish = c['finish_reason'] ?? null;
    const ids = this.keepsIds && Array.isArray(c['token_ids']) ? { token_ids: c['token_ids'] } : {};
    if (!this.#chat)
      return {
        index: c['index'] ?? 0,
        text,
        logprobs: null,
        finish_reason: finish,
        stop_reason: c['stop_reason'] ?? null,
        ...ids,
      };
    return {
      index: c['index'] ?? 0,
      delta: { content: text },
      logprobs: null,
      finish_reason: finish,
      ...(finish !== null ? { stop_reason: c['stop_reason'] ?? null } : {}),
      ...ids,
    };
  }

  /** The continuation's usage counts its prompt (the original one plus the resumed tokens) and only its own output. */
  #usage(u: Record<string, unknown>): Record<string, unknown> {
    const prompt = this.promptIds?.length ?? 0;
    const completion = this.#offset + (int(u['completion_tokens']) ?? 0);
    const out: Record<string, unknown> = {
      ...u,
      prompt_tokens: prompt,
      completion_tokens: completion,
      total_tokens: prompt + completion,
    };
    const details = obj(u['prompt_tokens_details']);
    const cached = int(details?.['cached_tokens']);
    if (details !== undefined && cached !== undefined)
      out['prompt_tokens_details'] = { ...details, cached_tokens: Math.min(cached, prompt) };
    return out;
  }
}

function hasOutput(choice: Record<string, unknown>): boolean {
  const delta = obj(choice['delta']);
  const text = choice['text'] ?? delta?.['content'];
  return (
    (typeof text === 'string' && text.length > 0) ||
    (Array.isArray(delta?.['tool_calls']) && (delta['tool_calls'] as unknown[]).length > 0)
  );
}
