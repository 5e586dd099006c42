/**
 * The preprocessing task of an embeddings request (`POST /v1/embeddings`): what its inputs weigh. Routing books an
 * embedding by its prompt tokens and gives it no prefix credit (routing's embeddings.ts), so the task only has to
 * count them: token-id inputs as given (concatenated: exact), text inputs tokenized with the model's tokenizer,
 * several texts joined by newlines (within a few tokens of the engine's per-input count: the special tokens are
 * added once, and a newline may merge with its neighbours). Each input may be as long as the model's prompt limit,
 * so the limit of the whole is that limit times the number of inputs; the engine checks each input against its own.
 */
import { KvgateError } from '../errors/index.js';
import type { PreprocessTask } from './preprocess/protocol.js';

export interface EmbeddingsTaskInputs {
  /** The schema-checked body (schemas.ts: `input` is a string, strings, token ids or lists of them). */
  readonly body: Readonly<Record<string, unknown>>;
  readonly model: string;
  readonly maxPromptTokens: number;
  readonly loraName: string | undefined;
  /** `nvext.token_data`, which an embeddings request does not take. */
  readonly tokenData: Uint32Array | undefined;
  /** The task's `returnTokenIds` (default true). */
  readonly returnTokenIds?: boolean | undefined;
}

/**
 * The task whose token count an embeddings request is booked by.
 * @throws KvgateError KVG_ERR_UNSUPPORTED_CONTENT for `nvext.token_data` (the inputs carry their own ids).
 */
export function embeddingsTask(inp: EmbeddingsTaskInputs): PreprocessTask {
  if (inp.tokenData !== undefined) {
    throw new KvgateError(
      'KVG_ERR_UNSUPPORTED_CONTENT',
      'nvext.token_data is not taken on the embeddings API; send token ids as `input`',
      { param: 'nvext.token_data' },
    );
  }
  const input = inp.body.input as string | string[] | number[] | number[][];
  const inputs = typeof input === 'string' || typeof input[0] === 'number' ? 1 : input.length;
  const base = {
    model: inp.model,
    maxPromptTokens: inp.maxPromptTokens * inputs,
    loraName: inp.loraName,
    cacheSalt: undefined,
    addSpecialTokens: typeof inp.body.add_special_tokens === 'boolean' ? inp.body.add_special_tokens : undefined,
    returnTokenIds: inp.returnTokenIds,
  };
  if (typeof input === 'string') return { kind: 'text', ...base, prompt: input };
  if (typeof input[0] === 'string') return { kind: 'text', ...base, prompt: (input as string[]).join('\n') };
  const ids = typeof input[0] === 'number' ? (input as number[]) : (input as number[][]).flat();
  return { kind: 'tokens', ...base, tokenIds: Uint32Array.from(ids), idsParam: 'input' };
}
