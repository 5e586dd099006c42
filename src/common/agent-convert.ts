/**
 * What both agent-API conversions (messages-convert.ts, responses-convert.ts) share: the chat request they
 * produce, the errors they raise, and the way vLLM writes a tool call's arguments.
 *
 * Contract: the conversion yields the chat messages and tools vLLM's own front end hands its chat pipeline
 * for the same request, so that kvgate's chat preprocessing renders the prompt the engine renders and the
 * request is routed on the engine's exact tokens.
 */
import { KvgateError } from '../errors/index.js';

/** A Messages or Responses request as the chat request vLLM runs it as (the fields that shape the prompt). */
export interface ChatConversion {
  readonly messages: Record<string, unknown>[];
  readonly tools: Record<string, unknown>[] | undefined;
  /** `tools` as vLLM's template sees them, where their numbers print otherwise in JavaScript (common's `pythonToolsJson`). */
  readonly toolsJson?: string | undefined;
  readonly chatTemplateKwargs: Record<string, unknown> | undefined;
  /** Responses only: the last input item is an unfinished assistant turn, rendered open-ended. */
  readonly continueFinalMessage: boolean;
}

export type Json = Record<string, unknown>;

export function isObject(value: unknown): value is Json {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** A field of the request that is missing or of the wrong type (KVG_ERR_INVALID_REQUEST, `param` names it). */
export function invalidField(param: string, message: string): KvgateError {
  return new KvgateError('KVG_ERR_INVALID_REQUEST', `${param} ${message}`, { param });
}

/** A content block or input item that is malformed or of a type the API does not have (KVG_ERR_INVALID_CONTENT_BLOCK). */
export function invalidBlock(param: string, message: string): KvgateError {
  return new KvgateError('KVG_ERR_INVALID_CONTENT_BLOCK', `${param} ${message}`, { param });
}

/** A block the API has but kvgate does not route (images, documents, files): the same refusal as a chat's non-text part. */
export function unsupportedBlock(param: string, type: string): KvgateError {
  return new KvgateError(
    'KVG_ERR_UNSUPPORTED_CONTENT',
    `${param} is ${JSON.stringify(type)}; kvgate routes text-only conversations`,
    { param },
  );
}

export function requireString(value: unknown, param: string): string {
  if (typeof value !== 'string') throw invalidBlock(param, 'must be a string');
  return value;
}
