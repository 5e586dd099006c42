/**
 * The OpenAI-compatible wire types of the simulated engine: request parsing
 * and validation (every rejection is a KvgateError with the offending `param`
 * in its detail, rendered as an OpenAI-style 4xx), and the response, chunk
 * and usage shapes vLLM's OpenAI server sends.
 *
 * Accepted and ignored: sampling knobs (temperature, top_p, stop, ...): the
 * simulated model always generates exactly max_tokens tokens, finish_reason
 * "length" ("tool_calls" when it calls a tool, see choice-output.ts).
 * Rejected with a clear 400: n > 1, echo, batched prompts.
 */
import { chatTemplateKwargsOf, pythonToolsJson } from '../common/index.js';
import { KvgateError } from '../errors/index.js';
import type { ChatMessage } from '../tokenizer/index.js';

export type PromptInput =
  | { kind: 'tokens'; tokens: number[] }
  | { kind: 'text'; text: string }
  | {
      kind: 'chat';
      messages: ChatMessage[];
      tools: unknown[] | undefined;
      /** `tools` as vLLM's template sees them, where their numbers print otherwise in JavaScript (common's `pythonToolsJson`). */
      toolsJson: string | undefined;
      templateKwargs: Record<string, unknown> | undefined;
    };

export interface BootstrapFields {
  host: string;
  port: number;
  /** 63-bit room id, exact (parsed from the raw body, beyond JSON's 2^53). */
  room: bigint;
}

export interface GenerateRequest {
  kind: 'completion' | 'chat';
  model: string | undefined;
  prompt: PromptInput;
  addSpecialTokens: boolean;
  maxTokens: number | undefined;
  stream: boolean;
  includeUsage: boolean;
  continuousUsage: boolean;
  seed: number | undefined;
  /** vLLM P/D ticket; undefined when absent or null. */
  kvTransferParams: Record<string, unknown> | undefined;
  /** SGLang P/D rendezvous; undefined when absent. */
  bootstrap: BootstrapFields | undefined;
  /** Explicit data-parallel rank (data_parallel_rank / routed_dp_rank). */
  dpRank: number | undefined;
  cacheSalt: string | undefined;
  /** Alternatives per token (completions `logprobs`, chat `top_logprobs` with `logprobs: true`); undefined: none. */
  logprobs: number | undefined;
  /** The function the simulated model calls (chat with `tools`, `tool_choice` not "none"). */
  toolName: string | undefined;
  /**
   * vLLM >= 0.10.2 `return_token_ids`: each choice carries its generated `token_ids`; the prompt's ids come
   * once (`prompt_token_ids`: top level for chat, on the choice for completions).
   */
  returnTokenIds: boolean;
  /** vLLM's request `priority` (any integer, lower first); undefined when absent. */
  priority: number | undefined;
}

function invalid(message: string, param: string | null): KvgateError {
  return new KvgateError('KVG_ERR_INVALID_REQUEST', message, { param });
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const isTokenId = (v: unknown): v is number =>
  typeof v === 'number' && Number.isInteger(v) && v >= 0 && v <= 0xffffffff;

function optionalInt(body: Record<string, unknown>, key: string, min: number): number | undefined {
  const v = body[key];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'number' || !Number.isInteger(v)) throw invalid(`${key} must be an integer`, key);
  if (v < min) throw invalid(`${key} must be at least ${min}, got ${v}`, key);
  return v;
}

function optionalBool(body: Record<string, unknown>, key: string): boolean | undefined {
  const v = body[key];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'boolean') throw invalid(`${key} must be a boolean`, key);
  return v;
}

function parsePrompt(p: unknown): PromptInput {
  // A one-element list is the same single prompt.
  if (Array.isArray(p) && p.length === 1 && (typeof p[0] === 'string' || Array.isArray(p[0]))) p = p[0];
  if (typeof p === 'string') {
    if (p.length === 0) throw invalid('prompt cannot be empty', 'prompt');
    return { kind: 'text', text: p };
  }
  if (Array.isArray(p)) {
    if (p.length === 0) throw invalid('prompt cannot be empty', 'prompt');
    if (p.every(isTokenId)) return { kind: 'tokens', tokens: p as number[] };
    if (p.every((x) => typeof x === 'string' || Array.isArray(x)))
      throw invalid(
        'batched prompts (a list of several prompts) are not supported; send one prompt per request',
        'prompt',
      );
    throw invalid('prompt token ids must be integers in [0, 2^32)', 'prompt');
  }
  throw invalid('prompt must be a string or a list of token ids', 'prompt');
}

function parseBootstrap(body: Record<string, unknown>, rawBody: string): BootstrapFields | undefined {
  const { bootstrap_host: host, bootstrap_port: port, bootstrap_room: room } = body;
  if (host === undefined && port === undefined && room === undefined) return undefined;
  if (Array.isArray(host) || Array.isArray(port) || Array.isArray(room))
    throw invalid('batched bootstrap fields are not supported', 'bootstrap_room');
  if (typeof host !== 'string' || host === '') throw invalid('bootstrap_host must be a host name', 'bootstrap_host');
  if (typeof port !== 'number' || !Number.isInteger(port) || port <= 0 || port > 65535)
    throw invalid('bootstrap_port must be a port number', 'bootstrap_port');
  if (typeof room !== 'number' || !Number.isInteger(room) || room < 0)
    throw invalid('bootstrap_room must be a non-negative integer', 'bootstrap_room');
  // JSON numbers lose precision above 2^53; the room is up to 2^63-1, so read its digits.
  let exact = BigInt(room);
  if (!Number.isSafeInteger(room)) {
    const m = /"bootstrap_room"\s*:\s*(\d+)/.exec(rawBody);
    if (m !== null) exact = BigInt(m[1]!);
  }
  return { host, port, room: exact };
}

/** A chat body's prompt (`parseGenerateRequest`'s arguments). @throws KvgateError KVG_ERR_INVALID_REQUEST */
function parseChatPrompt(body: Record<string, unknown>, rawBody: string, toolsJson: string | undefined): PromptInput {
  const messages = body.messages;
  if (messages === undefined || messages === null) throw invalid('messages is required', 'messages');
  if (!Array.isArray(messages) || messages.length === 0) throw invalid('messages must be a non-empty list', 'messages');
  const tools = body.tools;
  if (tools !== undefined && tools !== null && !Array.isArray(tools)) throw invalid('tools must be a list', 'tools');
  const kwargs = body.chat_template_kwargs;
  if (kwargs !== undefined && kwargs !== null && !isObject(kwargs))
    throw invalid('chat_template_kwargs must be an object', 'chat_template_kwargs');
  return {
    kind: 'chat',
    messages: messages as ChatMessage[],
    tools: (tools ?? undefined) as unknown[] | undefined,
    // As the gateway reads them (frontend's prompt-task.ts), so the two render the same prompt.
    toolsJson: toolsJson ?? pythonToolsJson(tools, Array.isArray(tools) ? Buffer.from(rawBody) : undefined),
    templateKwargs: chatTemplateKwargsOf(body),
  };
}

/**
 * Parses and validates a completions or chat-completions body.
 * @param rawBody the body text, for exact big integers and the tools' number literals
 * @param agent for an agent API's chat body: its tools as its conversion wrote them (common's `pythonToolsJson`); its
 *   tools may include ones without a name (`parseToolName`)
 * @throws KvgateError KVG_ERR_INVALID_REQUEST with `detail.param`
 */
export function parseGenerateRequest(
  kind: 'completion' | 'chat',
  body: unknown,
  rawBody: string,
  agent?: { readonly toolsJson: string | undefined },
): GenerateRequest {
  if (!isObject(body)) throw invalid('the request body must be a JSON object', null);
  const model = body.model;
  if (model !== undefined && model !== null && typeof model !== 'string')
    throw invalid('model must be a string', 'model');

  let prompt: PromptInput;
  if (kind === 'completion') {
    if (body.prompt === undefined || body.prompt === null) throw invalid('prompt is required', 'prompt');
    prompt = parsePrompt(body.prompt);
  } else prompt = parseChatPrompt(body, rawBody, agent?.toolsJson);

  const maxTokensKey =
    kind === 'chat' && body.max_completion_tokens !== undefined && body.max_completion_tokens !== null
      ? 'max_completion_tokens'
      : 'max_tokens';
  const maxTokens = optionalInt(body, maxTokensKey, 1);
  const n = optionalInt(body, 'n', 1);
  if (n !== undefined && n !== 1) throw invalid('n > 1 is not supported by the simulated engine', 'n');
  if (body.echo === true) throw invalid('echo is not supported by the simulated engine', 'echo');
  const stream = optionalBool(body, 'stream') ?? false;
  const so = body.stream_options;
  let includeUsage = false;
  let continuousUsage = false;
  if (so !== undefined && so !== null) {
    if (!stream) throw invalid('stream_options can only be given when stream is true', 'stream_options');
    if (!isObject(so)) throw invalid('stream_options must be an object', 'stream_options');
    includeUsage = optionalBool(so, 'include_usage') ?? false;
    continuousUsage = optionalBool(so, 'continuous_usage_stats') ?? false;
  }
  let seed: number | undefined;
  if (body.seed !== undefined && body.seed !== null) {
    if (typeof body.seed !== 'number' || !Number.isInteger(body.seed)) throw invalid('seed must be an integer', 'seed');
    seed = Number(BigInt.asUintN(32, BigInt(body.seed)));
  }
  const ktp = body.kv_transfer_params;
  if (ktp !== undefined && ktp !== null && !isObject(ktp))
    throw invalid('kv_transfer_params must be an object', 'kv_transfer_params');
  const cacheSalt = body.cache_salt;
  if (cacheSalt !== undefined && cacheSalt !== null && (typeof cacheSalt !== 'string' || cacheSalt === ''))
    throw invalid('cache_salt must be a non-empty string', 'cache_salt');
  const dpRank = optionalInt(body, 'data_parallel_rank', 0) ?? optionalInt(body, 'routed_dp_rank', 0);
  const addSpecial = optionalBool(body, 'add_special_tokens') ?? kind === 'completion';

  return {
    kind,
    model: (model ?? undefined) as string | undefined,
    prompt,
    addSpecialTokens: addSpecial,
    maxTokens,
    stream,
    includeUsage,
    continuousUsage,
    seed,
    kvTransferParams: (ktp ?? undefined) as Record<string, unknown> | undefined,
    bootstrap: parseBootstrap(body, rawBody),
    dpRank,
    cacheSalt: (cacheSalt ?? undefined) as string | undefined,
    logprobs: parseLogprobs(kind, body),
    toolName:
      kind === 'chat'
        ? parseToolName(body.tools as unknown[] | undefined | null, body.tool_choice, agent !== undefined)
        : undefined,
    returnTokenIds: optionalBool(body, 'return_token_ids') ?? false,
    priority: optionalInt(body, 'priority', Number.MIN_SAFE_INTEGER),
  };
}

/** vLLM's limit on alternatives per token. */
const MAX_LOGPROBS = 20;

/** Completions: `logprobs: k`; chat: `logprobs: true` with `top_logprobs: k` (default 0). */
function parseLogprobs(kind: 'completion' | 'chat', body: Record<string, unknown>): number | undefined {
  const key = kind === 'completion' ? 'logprobs' : 'top_logprobs';
  const k = optionalInt(body, key, 0);
  if (k !== undefined && k > MAX_LOGPROBS) throw invalid(`${key} must be at most ${MAX_LOGPROBS}, got ${k}`, key);
  if (kind === 'completion') return k;
  const on = optionalBool(body, 'logprobs') ?? false;
  if (!on && k !== undefined && k > 0) throw invalid('top_logprobs needs logprobs set to true', 'top_logprobs');
  return on ? (k ?? 0) : undefined;
}

/**
 * The tool the simulated model calls: the named one, else the first (`auto`, `required`); none for "none" or no tools.
 * `agent`: the tools are an agent API's, wrapped whole as chat functions (common's `agentChat`), where a Responses
 * tool without a name (`{"type": "local_shell"}`, `{"type": "web_search"}`) is no error: vLLM passes it to the chat
 * template, and it is never called.
 */
function parseToolName(tools: unknown[] | undefined | null, choice: unknown, agent: boolean): string | undefined {
  const names = (tools ?? []).flatMap((t, i) => {
    const fn = isObject(t) ? t.function : undefined;
    if (!isObject(t) || t.type !== 'function' || !isObject(fn) || typeof fn.name !== 'string' || fn.name === '') {
      if (agent && isObject(t) && isObject(fn)) return [];
      throw invalid(`tools[${i}] must be a function tool with a name`, 'tools');
    }
    return [fn.name];
  });
  if (choice === 'none') return undefined;
  if (choice === undefined || choice === null || choice === 'auto' || choice === 'required') {
    if (names.length === 0 && choice === 'required') throw invalid('tool_choice "required" needs tools', 'tool_choice');
    return names[0];
  }
  const fn = isObject(choice) ? choice.function : undefined;
  if (!isObject(choice) || choice.type !== 'function' || !isObject(fn) || typeof fn.name !== 'string') {
    throw invalid(
      'tool_choice must be "none", "auto", "required" or {"type": "function", "function": {"name": ...}}',
      'tool_choice',
    );
  }
  if (!names.includes(fn.name))
    throw invalid(`tool_choice names ${fn.name}, which is not among the tools`, 'tool_choice');
  return fn.name;
}

// ----------------------------------------------------------------- responses

export interface Usage {
  prompt_tokens: number;
  total_tokens: number;
  completion_tokens: number;
  prompt_tokens_details: { cached_tokens: number };
}

export function usage(promptTokens: number, completionTokens: number, cachedTokens: number): Usage {
  return {
    prompt_tokens: promptTokens,
    total_tokens: promptTokens + completionTokens,
    completion_tokens: completionTokens,
    prompt_tokens_details: { cached_tokens: cachedTokens },
  };
}

export interface ResponseMeta {
  id: string;
  created: number;
  model: string;
}

export function completionChunk(
  m: ResponseMeta,
  text: string,
  finishReason: string | null,
  u?: Usage,
  logprobs: unknown = null,
): Record<string, unknown> {
  const chunk: Record<string, unknown> = {
    id: m.id,
    object: 'text_completion',
    created: m.created,
    model: m.model,
    choices: [{ index: 0, text, logprobs, finish_reason: finishReason, stop_reason: null }],
  };
  if (u !== undefined) chunk.usage = u;
  return chunk;
}

/** A chat stream chunk; `delta` is {role, content} first, then {content} (or {tool_calls}). */
export function chatChunk(
  m: ResponseMeta,
  delta: Record<string, unknown>,
  finishReason: string | null,
  u?: Usage,
  logprobs: unknown = null,
): Record<string, unknown> {
  const choice: Record<string, unknown> = { index: 0, delta, logprobs, finish_reason: finishReason };
  if (finishReason !== null) choice.stop_reason = null;
  const chunk: Record<string, unknown> = {
    id: m.id,
    object: 'chat.completion.chunk',
    created: m.created,
    model: m.model,
    choices: [choice],
  };
  if (u !== undefined) chunk.usage = u;
  return chunk;
}

/** The final `include_usage` chunk: no choices, only usage. */
export function usageChunk(m: ResponseMeta, kind: 'completion' | 'chat', u: Usage): Record<string, unknown> {
  return {
    id: m.id,
    object: kind === 'chat' ? 'chat.completion.chunk' : 'text_completion',
    created: m.created,
    model: m.model,
    choices: [],
    usage: u,
  };
}

/** The whole answer's one choice: its text (completion) or message (chat), logprobs and finish reason. */
export interface WholeChoice {
  readonly text: string;
  readonly message: Record<string, unknown>;
  readonly logprobs: unknown;
  readonly finishReason: string;
}

export function completionResponse(
  m: ResponseMeta,
  c: WholeChoice,
  u: Usage,
  kvTransferParams: unknown,
): Record<string, unknown> {
  return {
    id: m.id,
    object: 'text_completion',
    created: m.created,
    model: m.model,
    choices: [
      {
        index: 0,
        text: c.text,
        logprobs: c.logprobs,
        finish_reason: c.finishReason,
        stop_reason: null,
        prompt_logprobs: null,
      },
    ],
    usage: u,
    kv_transfer_params: kvTransferParams ?? null,
  };
}

export function chatResponse(
  m: ResponseMeta,
  c: WholeChoice,
  u: Usage,
  kvTransferParams: unknown,
): Record<string, unknown> {
  return {
    id: m.id,
    object: 'chat.completion',
    created: m.created,
    model: m.model,
    choices: [{ index: 0, message: c.message, logprobs: c.logprobs, finish_reason: c.finishReason, stop_reason: null }],
    service_tier: null,
    system_fingerprint: null,
    usage: u,
    prompt_logprobs: null,
    kv_transfer_params: kvTransferParams ?? null,
  };
}
