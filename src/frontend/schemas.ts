/**
 * JSON schemas of the request bodies kvgate reads, compiled once with ajv.
 * They check what routing and preprocessing rely on (model, messages, prompt,
 * stream, the nvext extension) and the types of common sampling fields;
 * other fields pass through to the engine unchecked, as engines accept many
 * more parameters than the OpenAI API lists.
 */
import { Ajv, type ErrorObject, type ValidateFunction } from 'ajv';
import { KvgateError } from '../errors/index.js';

const u32 = { type: 'integer', minimum: 0, maximum: 4294967295 } as const;
const workerId = { type: 'integer', minimum: 0, maximum: Number.MAX_SAFE_INTEGER } as const;
const nullableInt = (minimum: number) => ({ type: ['integer', 'null'], minimum }) as const;

/** Dynamo's `nvext` request extension, plus kvgate's `lora_name`. */
const nvext = {
  type: 'object',
  properties: {
    backend_instance_id: workerId,
    prefill_worker_id: workerId,
    decode_worker_id: workerId,
    dp_rank: u32,
    prefill_dp_rank: u32,
    annotations: { type: 'array', items: { type: 'string', maxLength: 1024 }, maxItems: 64 },
    allowed_worker_ids: { type: 'array', items: workerId, maxItems: 65536 },
    agent_hints: {
      type: 'object',
      properties: {
        osl: { type: 'integer', minimum: 0 },
        priority: { type: 'number' },
        latency_sensitivity: { type: 'number' },
      },
    },
    session_control: {
      type: 'object',
      required: ['session_id'],
      properties: {
        session_id: { type: 'string', minLength: 1, maxLength: 256 },
        parent_session_id: { type: 'string', minLength: 1, maxLength: 256 },
        action: { enum: ['open', 'close'] },
        timeout: { type: 'number', exclusiveMinimum: 0 },
      },
    },
    routing_constraints: {
      type: 'object',
      additionalProperties: false,
      properties: {
        required_taints: { type: 'array', items: { type: 'string', minLength: 1, maxLength: 128 }, maxItems: 64 },
        preferred_taints: {
          type: 'object',
          maxProperties: 64,
          additionalProperties: { type: 'number', exclusiveMinimum: 0, maximum: 1e6 },
        },
      },
    },
    router_config_override: { type: 'object' },
    token_data: { type: 'array', items: u32, minItems: 1 },
    lora_name: { type: 'string', minLength: 1, maxLength: 256 },
    extra_fields: { type: 'array', items: { type: 'string' } },
  },
} as const;

const common = {
  model: { type: 'string', minLength: 1, maxLength: 256 },
  stream: { type: 'boolean' },
  stream_options: { type: ['object', 'null'], properties: { include_usage: { type: 'boolean' } } },
  min_tokens: nullableInt(0),
  n: { type: 'integer', minimum: 1, maximum: 128 },
  temperature: { type: ['number', 'null'], minimum: 0 },
  top_p: { type: ['number', 'null'], minimum: 0, maximum: 1 },
  top_k: { type: ['integer', 'null'] },
  presence_penalty: { type: ['number', 'null'] },
  frequency_penalty: { type: ['number', 'null'] },
  seed: { type: ['integer', 'null'] },
  stop: { anyOf: [{ type: 'string' }, { type: 'array', items: { type: 'string' } }, { type: 'null' }] },
  user: { type: 'string' },
  cache_salt: { type: 'string', minLength: 1 },
  add_special_tokens: { type: 'boolean' },
  return_token_ids: { type: ['boolean', 'null'] },
  priority: { type: 'integer' },
  nvext,
} as const;

const contentPart = {
  type: 'object',
  required: ['type'],
  properties: { type: { type: 'string' }, text: { type: 'string' } },
} as const;

const message = {
  type: 'object',
  required: ['role'],
  properties: {
    role: { type: 'string', minLength: 1 },
    content: { anyOf: [{ type: 'string' }, { type: 'null' }, { type: 'array', items: contentPart }] },
    name: { type: 'string' },
    tool_call_id: { type: 'string' },
    tool_calls: { type: ['array', 'null'] },
  },
} as const;

/**
 * Top-level members a body may have: far more than any OpenAI request carries, few enough that a large body's
 * members (parsed on a preprocessing thread) cost the main thread little (common's json-lazy.ts).
 */
const MAX_BODY_MEMBERS = 1024;

const CHAT_SCHEMA = {
  type: 'object',
  maxProperties: MAX_BODY_MEMBERS,
  required: ['model', 'messages'],
  properties: {
    ...common,
    messages: { type: 'array', minItems: 1, items: message },
    // An engine refuses 0 (a 400 after routing and booking): refused here, before either.
    max_tokens: nullableInt(1),
    max_completion_tokens: nullableInt(1),
    tools: { type: ['array', 'null'] },
    chat_template_kwargs: { type: ['object', 'null'] },
    add_generation_prompt: { type: 'boolean' },
    continue_final_message: { type: 'boolean' },
  },
} as const;

const COMPLETION_SCHEMA = {
  type: 'object',
  maxProperties: MAX_BODY_MEMBERS,
  required: ['model', 'prompt'],
  properties: {
    ...common,
    prompt: {
      anyOf: [
        { type: 'string' },
        { type: 'array', minItems: 1, items: u32 },
        { type: 'array', minItems: 1, items: { type: 'string' } },
        { type: 'array', minItems: 1, items: { type: 'array', minItems: 1, items: u32 } },
      ],
    },
    max_tokens: nullableInt(0),
    echo: { type: 'boolean' },
    suffix: { type: ['string', 'null'] },
    logprobs: { type: ['integer', 'null'], minimum: 0 },
  },
  // `max_tokens: 0` asks for no generation: meaningful only with `echo` (scoring a prompt's logprobs).
  if: { required: ['echo'], properties: { echo: { const: true } } },
  else: { properties: { max_tokens: nullableInt(1) } },
} as const;

/**
 * OpenAI's embeddings body as vLLM takes it: `input` a string, strings, token ids or lists of them (at most 2,048
 * inputs, OpenAI's bound); the pooling fields typed; no streaming (an embedding answer is one JSON object).
 */
const EMBEDDINGS_SCHEMA = {
  type: 'object',
  maxProperties: MAX_BODY_MEMBERS,
  required: ['model', 'input'],
  properties: {
    model: common.model,
    input: {
      anyOf: [
        { type: 'string' },
        { type: 'array', minItems: 1, maxItems: 2048, items: { type: 'string' } },
        { type: 'array', minItems: 1, items: u32 },
        { type: 'array', minItems: 1, maxItems: 2048, items: { type: 'array', minItems: 1, items: u32 } },
      ],
    },
    encoding_format: { enum: ['float', 'base64'] },
    dimensions: { type: ['integer', 'null'], minimum: 1 },
    user: common.user,
    truncate_prompt_tokens: { type: ['integer', 'null'], minimum: -1 },
    add_special_tokens: common.add_special_tokens,
    cache_salt: common.cache_salt,
    priority: common.priority,
    stream: { const: false },
    nvext,
  },
} as const;

/**
 * What an agent API's body (Anthropic Messages, OpenAI Responses) shares with the others, checked before anything
 * reads it: the model, `stream`, the cache salt, kvgate's `nvext` (routing hints read it as they read a chat's), and
 * the bound on top-level members. The rest is the API's own, checked as the body is converted (common's
 * messages-convert.ts and responses-convert.ts).
 */
const AGENT_SCHEMA = {
  type: 'object',
  maxProperties: MAX_BODY_MEMBERS,
  required: ['model'],
  properties: {
    model: common.model,
    stream: common.stream,
    cache_salt: common.cache_salt,
    nvext,
  },
} as const;

/** Readable messages for `anyOf` failures, where ajv's own ("must match a schema in anyOf") says nothing. */
const ANY_OF_MESSAGES: Record<string, string> = {
  prompt: 'must be a string, a list of token ids, or a list holding one string or one list of token ids',
  input: 'must be a string, a list of strings, a list of token ids, or a list of lists of token ids (at most 2,048)',
  content: 'must be a string, null, or a list of content parts',
  stop: 'must be a string, a list of strings, or null',
};

const ajv = new Ajv({ allErrors: false, allowUnionTypes: true, strict: true, coerceTypes: false });
const validators: Record<'chat' | 'completion' | 'embeddings' | 'agent', ValidateFunction> = {
  chat: ajv.compile(CHAT_SCHEMA),
  completion: ajv.compile(COMPLETION_SCHEMA),
  embeddings: ajv.compile(EMBEDDINGS_SCHEMA),
  agent: ajv.compile(AGENT_SCHEMA),
};

/** `/messages/0/role` -> `messages[0].role`. */
function jsonPointerToParam(pointer: string, extra?: string): string {
  const parts = pointer
    .split('/')
    .slice(1)
    .map((p) => p.replace(/~1/g, '/').replace(/~0/g, '~'));
  if (extra !== undefined) parts.push(extra);
  let out = '';
  for (const p of parts) out += /^\d+$/.test(p) ? `[${p}]` : out === '' ? p : `.${p}`;
  return out;
}

function describe(err: ErrorObject): { param: string; message: string } {
  if (err.keyword === 'required') {
    const missing = (err.params as { missingProperty: string }).missingProperty;
    return { param: jsonPointerToParam(err.instancePath, missing), message: 'is required' };
  }
  const param = jsonPointerToParam(err.instancePath);
  if (err.keyword === 'anyOf') {
    const last =
      param
        .replace(/\[\d+\]$/, '')
        .split('.')
        .at(-1) ?? '';
    return { param, message: ANY_OF_MESSAGES[last] ?? 'has none of the accepted shapes' };
  }
  return { param, message: err.message ?? 'is invalid' };
}

/**
 * Checks a parsed body against the endpoint's schema and the limits on its shape. The message count is checked
 * first: a chat's every message costs the schema check and the template's rendering whatever its length. `agent`:
 * the shared part of an agent API's body (`AGENT_SCHEMA`), whose own count is the caller's (agent-task.ts).
 * @throws KvgateError KVG_ERR_TOO_MANY_MESSAGES over `limits.maxMessages`; KVG_ERR_INVALID_REQUEST with
 *   `detail.param` naming the field.
 */
export function validateBody(
  kind: 'chat' | 'completion' | 'embeddings' | 'agent',
  body: unknown,
  limits: { readonly maxMessages: number },
): asserts body is Record<string, unknown> {
  const messages = kind === 'chat' ? (body as { messages?: unknown } | null)?.messages : undefined;
  if (Array.isArray(messages) && messages.length > limits.maxMessages) {
    throw new KvgateError(
      'KVG_ERR_TOO_MANY_MESSAGES',
      `messages holds ${messages.length} messages; kvgate accepts at most ${limits.maxMessages} per request`,
      { param: 'messages', messages: messages.length, maxMessages: limits.maxMessages },
    );
  }
  const validate = validators[kind];
  if (validate(body)) return;
  // For a field with several accepted shapes, ajv lists each branch's failure
  // first ("must be string") and the anyOf failure last; the latter says what is accepted.
  const err = validate.errors?.find((e) => e.keyword === 'anyOf') ?? validate.errors?.[0];
  const { param, message } = err !== undefined ? describe(err) : { param: '', message: 'is invalid' };
  throw new KvgateError('KVG_ERR_INVALID_REQUEST', param === '' ? `request body ${message}` : `${param} ${message}`, {
    param,
  });
}
