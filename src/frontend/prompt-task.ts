/**
 * From a validated request body to the preprocessing task: which prompt form
 * it uses (chat messages, text, token ids, or nvext.token_data), and the
 * request fields that change tokenization or hashing (add_special_tokens,
 * cache_salt, the LoRA name, chat template options).
 *
 * `nvext.token_data` (Dynamo's pre-tokenized prompt): a request is booked by
 * its token ids, so they must be what its engine processes. Dynamo sends its
 * engines token ids; kvgate forwards OpenAI bodies. So a completion's
 * `token_data` is its prompt: only hashed here (the cheap path agent frameworks
 * use to skip tokenization), and sent to the engine as `prompt` in place of
 * the body's (request-parse.ts). A chat's engine renders and tokenizes its
 * messages itself, so its `token_data` is checked: the messages are rendered
 * and tokenized as usual and must give exactly those ids
 * (KVG_ERR_TOKEN_DATA_MISMATCH otherwise).
 */
import { chatTemplateKwargsOf, pythonToolsJson, type InlineSystemMode } from '../common/index.js';
import { KvgateError } from '../errors/index.js';
import { agentChatTask } from './agent-task.js';
import { embeddingsTask } from './embeddings.js';
import type { PreprocessTask } from './preprocess/protocol.js';
import type { EndpointKind } from './router-port.js';

export interface TaskInputs {
  endpoint: EndpointKind;
  body: Readonly<Record<string, unknown>>;
  model: string;
  maxPromptTokens: number;
  /** `nvext.token_data`: a completion's prompt as token ids, or the ids a chat's messages must give (module comment). */
  tokenData: Uint32Array | undefined;
  loraName: string | undefined;
  /** Whether the caller reads the prompt's ids, not only their count (the task's `returnTokenIds`; default true). */
  returnTokenIds?: boolean | undefined;
  /** The model's `anthropic_inline_system` (a Messages body's; default `preserve`). */
  inlineSystem?: InlineSystemMode | undefined;
  /** The body's UTF-8 JSON, where there is one (its tools' number literals; an agent body's tool_use literals: agent-task.ts). */
  source?: Uint8Array | undefined;
}

function unsupported(param: string, message: string): KvgateError {
  return new KvgateError('KVG_ERR_UNSUPPORTED_CONTENT', `${param} ${message}`, { param });
}

/**
 * A chat's content parts are all text.
 * @throws KvgateError KVG_ERR_UNSUPPORTED_CONTENT naming the first part that is not.
 */
function checkTextOnly(messages: readonly { content?: unknown }[]): void {
  for (let i = 0; i < messages.length; i++) {
    const content = messages[i]!.content;
    if (!Array.isArray(content)) continue;
    for (let j = 0; j < content.length; j++) {
      const part = content[j] as { type: string };
      if (part.type !== 'text') {
        throw unsupported(
          `messages[${i}].content[${j}].type`,
          `is ${JSON.stringify(part.type)}; kvgate routes text-only chats (content parts of type "text")`,
        );
      }
    }
  }
}

/**
 * The preprocessing task for a request (the body must have passed its schema).
 * @throws KvgateError KVG_ERR_UNSUPPORTED_CONTENT for batch prompts and non-text message parts.
 */
export function promptTask(inp: TaskInputs): PreprocessTask {
  const { body, model, maxPromptTokens, loraName, returnTokenIds } = inp;
  if (inp.endpoint === 'messages' || inp.endpoint === 'responses') {
    if (inp.tokenData !== undefined) throw unsupported('nvext.token_data', `is not taken on the ${inp.endpoint} API`);
    return agentChatTask({
      api: inp.endpoint,
      body: body as Record<string, unknown>,
      model,
      maxPromptTokens,
      loraName,
      returnTokenIds,
      inlineSystem: inp.inlineSystem,
      source: inp.source,
    });
  }
  if (inp.endpoint === 'embeddings')
    return embeddingsTask({ body, model, maxPromptTokens, loraName, tokenData: inp.tokenData, returnTokenIds });
  // Each task is one object literal of a fixed shape (no spread of a shared base): built per request, so a
  // shape the engine's inline caches see again and again is cheaper than a copied one.
  const cacheSalt = typeof body.cache_salt === 'string' ? body.cache_salt : undefined;
  const addSpecialTokens = typeof body.add_special_tokens === 'boolean' ? body.add_special_tokens : undefined;
  const tokens = (tokenIds: Uint32Array, idsParam: 'prompt' | 'nvext.token_data' = 'prompt'): PreprocessTask => ({
    kind: 'tokens',
    model,
    maxPromptTokens,
    loraName,
    cacheSalt,
    addSpecialTokens,
    returnTokenIds,
    tokenIds,
    idsParam,
  });
  const text = (prompt: string): PreprocessTask => ({
    kind: 'text',
    model,
    maxPromptTokens,
    loraName,
    cacheSalt,
    addSpecialTokens,
    returnTokenIds,
    prompt,
  });
  if (inp.endpoint === 'chat') {
    const messages = body.messages as { content?: unknown }[];
    checkTextOnly(messages);
    return {
      kind: 'chat',
      model,
      maxPromptTokens,
      loraName,
      cacheSalt,
      addSpecialTokens,
      messages,
      tools: Array.isArray(body.tools) ? body.tools : undefined,
      toolsJson: pythonToolsJson(body.tools, inp.source),
      chatTemplateKwargs: chatTemplateKwargsOf(body),
      addGenerationPrompt: typeof body.add_generation_prompt === 'boolean' ? body.add_generation_prompt : undefined,
      continueFinalMessage: typeof body.continue_final_message === 'boolean' ? body.continue_final_message : undefined,
      tokenData: inp.tokenData,
      returnTokenIds,
    };
  }
  if (inp.tokenData !== undefined) return tokens(inp.tokenData, 'nvext.token_data');
  const prompt = body.prompt as string | number[] | string[] | number[][] | Uint32Array;
  if (typeof prompt === 'string') return text(prompt);
  // Ids a large body's parse read from its bytes (preprocess/body-task.ts): already the task's array.
  if (prompt instanceof Uint32Array) return tokens(prompt);
  const first = prompt[0];
  if (typeof first === 'number') return tokens(Uint32Array.from(prompt as number[]));
  if (prompt.length > 1) {
    throw unsupported(
      'prompt',
      `holds ${prompt.length} prompts; send one prompt per request (each is routed on its own)`,
    );
  }
  return typeof first === 'string' ? text(first) : tokens(Uint32Array.from(first!));
}
