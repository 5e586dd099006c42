/**
 * The simulated engine's `POST /v1/embeddings`, as vLLM's pooling front end answers it: `input` as a string,
 * strings, token ids or lists of them; each input tokenized (`add_special_tokens`, default true), cut to its last
 * `truncate_prompt_tokens` tokens when asked, and checked against `max_model_len`; one vector per input in
 * `data`, as floats or base64 (little-endian float32, what the OpenAI clients ask for by default), and
 * `usage.prompt_tokens` the inputs' tokens.
 *
 * A vector is a pure function of its input's token ids (not of the engine, its seed or its rank): unit length,
 * `dimensions` long (default and most `EMBEDDING_DIMENSIONS`; a shorter one is the full vector's head,
 * renormalized, as a Matryoshka model's). So any engine gives the same vector for the same input, as replicas of
 * one model do.
 */
import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { fmix32, seededRng, sendJson } from '../common/index.js';
import { KvgateError } from '../errors/index.js';
import type { TextTokenizer } from '../tokenizer/index.js';
import { readJsonBody } from './generation.js';
import type { FilledMockerOptions } from './options.js';

/** The length of the engine's vectors. */
export const EMBEDDING_DIMENSIONS = 64;

export interface EmbeddingsOptions {
  readonly options: FilledMockerOptions;
  readonly tokenizer: TextTokenizer;
}

function invalid(param: string, message: string): KvgateError {
  return new KvgateError('KVG_ERR_INVALID_REQUEST', `${param} ${message}`, { param });
}

const isIds = (v: unknown): v is number[] =>
  Array.isArray(v) && v.length > 0 && v.every((t) => typeof t === 'number' && Number.isInteger(t) && t >= 0);

/** The inputs, each as text or token ids. @throws KvgateError KVG_ERR_INVALID_REQUEST */
function inputsOf(input: unknown): (string | number[])[] {
  if (typeof input === 'string') return [input];
  if (isIds(input)) return [input];
  if (Array.isArray(input) && input.length > 0) {
    if (input.every((s) => typeof s === 'string')) return input as string[];
    if (input.every(isIds)) return input;
  }
  throw invalid('input', 'must be a string, a list of strings, token ids, or a list of lists of token ids');
}

/** A unit vector of `dims` components from the token ids alone (module comment). */
export function embeddingOf(ids: readonly number[], dims: number): Float32Array {
  let h = 0x2545f491;
  for (const id of ids) h = fmix32(h ^ Math.imul(id + 1, 0x9e3779b1));
  const rng = seededRng(h);
  const full = Array.from({ length: EMBEDDING_DIMENSIONS }, () => rng() * 2 - 1);
  const head = full.slice(0, dims);
  const norm = Math.hypot(...head) || 1;
  return Float32Array.from(head, (x) => x / norm);
}

function encoded(v: Float32Array, format: string): number[] | string {
  if (format === 'float') return Array.from(v);
  const bytes = Buffer.alloc(v.length * 4);
  v.forEach((x, i) => bytes.writeFloatLE(x, i * 4));
  return bytes.toString('base64');
}

/** The fields of the body besides `input`, checked. @throws KvgateError */
function fieldsOf(b: Record<string, unknown>, o: FilledMockerOptions): { dims: number; format: string; cut: number } {
  if (b.model !== undefined && b.model !== o.model && !o.loraNames.includes(b.model as string)) {
    throw new KvgateError('KVG_ERR_MODEL_NOT_FOUND', `The model \`${String(b.model)}\` does not exist.`, {
      param: 'model',
    });
  }
  const format = b.encoding_format ?? 'float';
  if (format !== 'float' && format !== 'base64') throw invalid('encoding_format', 'must be "float" or "base64"');
  const dims = b.dimensions ?? EMBEDDING_DIMENSIONS;
  if (typeof dims !== 'number' || !Number.isInteger(dims) || dims < 1 || dims > EMBEDDING_DIMENSIONS)
    throw invalid('dimensions', `must be an integer from 1 to ${EMBEDDING_DIMENSIONS}`);
  const cut = b.truncate_prompt_tokens ?? 0;
  if (typeof cut !== 'number' || !Number.isInteger(cut) || cut < -1)
    throw invalid('truncate_prompt_tokens', 'must be an integer of at least -1');
  return { dims, format, cut: cut === -1 ? o.maxModelLen : cut };
}

/** POST /v1/embeddings. @throws KvgateError (answered by the caller as an OpenAI error) */
export async function serveEmbeddings(e: EmbeddingsOptions, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const { body } = await readJsonBody(req);
  if (typeof body !== 'object' || body === null || Array.isArray(body)) throw invalid('body', 'must be a JSON object');
  const b = body as Record<string, unknown>;
  const o = e.options;
  const { dims, format, cut } = fieldsOf(b, o);
  const special = b.add_special_tokens !== false;
  const data: Record<string, unknown>[] = [];
  let promptTokens = 0;
  for (const [index, input] of inputsOf(b.input).entries()) {
    let ids = typeof input === 'string' ? await e.tokenizer.encode(input, { addSpecialTokens: special }) : input;
    if (cut > 0 && ids.length > cut) ids = ids.slice(ids.length - cut);
    if (ids.length === 0) throw invalid('input', `input ${index} is empty after tokenization`);
    if (ids.length > o.maxModelLen) {
      throw new KvgateError(
        'KVG_ERR_PROMPT_TOO_LONG',
        `This model's maximum context length is ${o.maxModelLen} tokens. However, you requested ` +
          `${ids.length} tokens in the input for embedding generation. Please reduce the length of the input.`,
        { param: 'input' },
      );
    }
    promptTokens += ids.length;
    data.push({ index, object: 'embedding', embedding: encoded(embeddingOf(ids, dims), format) });
  }
  const requestId = typeof req.headers['x-request-id'] === 'string' ? req.headers['x-request-id'] : undefined;
  sendJson(res, 200, {
    id: `embd-${requestId ?? randomUUID().replaceAll('-', '')}`,
    object: 'list',
    created: Math.floor(Date.now() / 1000),
    model: typeof b.model === 'string' ? b.model : o.model,
    data,
    usage: {
      prompt_tokens: promptTokens,
      total_tokens: promptTokens,
      completion_tokens: 0,
      prompt_tokens_details: null,
    },
  });
}
