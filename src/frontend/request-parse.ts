/**
 * From a request body's text to what routing needs, short of tokenizing: the
 * JSON object (nesting bound, parse), the endpoint's schema and limits, the
 * model (or LoRA adapter) it names, the routing hints, the preprocessing task,
 * and the fields its engine's body differs in.
 *
 * The same steps, in the same order, run on the main thread for a small body
 * (prepare.ts) and on a preprocessing thread for a large one
 * (preprocess/body-task.ts), where the served models are a snapshot the main
 * thread sends along. Every failure up to the hints is thrown; a failure of
 * the prompt task is returned instead, as its owner answers it only after the
 * model's availability (a 503 goes before a 400 about the prompt).
 */
import type { IncomingHttpHeaders } from 'node:http';
import type { RoutingHints } from '../common/index.js';
import type { ServedModelConfig } from './inline-system-modes.js';
import { parseBodyObject } from './body.js';
import { parseRoutingHints } from './hints.js';
import { resolveModel, type Served } from './model-lookup.js';
import type { PreprocessTask } from './preprocess/protocol.js';
import { checkAgentBody } from './agent-task.js';
import { promptTask } from './prompt-task.js';
import { answerShowsTokenIds } from './query-response.js';
import type { EndpointKind } from './router-port.js';
import { validateBody } from './schemas.js';

/** What parsing a request reads of a served model: the lookup's fields, the prompt limit and the worker ids (for pins). */
export interface ServedModel extends Served {
  readonly model: Served['model'] &
    Pick<ServedModelConfig, 'maxPromptTokens' | 'anthropicInlineSystem'> & {
      readonly workers: readonly { readonly id: number }[];
      /** Its `client_pins` (absent: `allow`). */
      readonly clientPins?: 'allow' | 'deny' | undefined;
    };
}

export interface ParsedBody {
  /** The endpoint the body came in on (`route`: `POST /v1/route`, a query whose body is a chat's or a completion's). */
  readonly kind: EndpointKind | 'route';
  readonly endpoint: EndpointKind;
  readonly body: Record<string, unknown>;
}

/**
 * The body of a chat or completion request (`route`: whichever it is), parsed and checked.
 * @throws KvgateError KVG_ERR_INVALID_JSON, KVG_ERR_INVALID_REQUEST, KVG_ERR_TOO_MANY_MESSAGES.
 */
export function parseRequestBody(
  text: string,
  kind: EndpointKind | 'route',
  limits: { readonly maxMessages: number },
): ParsedBody {
  return checkRequestBody(parseBodyObject(text), kind, limits);
}

/**
 * `parseRequestBody`'s checks of a body already parsed (`parseBodyObject`'s nesting bound included).
 * @throws KvgateError KVG_ERR_INVALID_REQUEST, KVG_ERR_TOO_MANY_MESSAGES.
 */
export function checkRequestBody(
  body: Record<string, unknown>,
  kind: EndpointKind | 'route',
  limits: { readonly maxMessages: number },
): ParsedBody {
  const endpoint: EndpointKind = kind === 'route' ? (body.messages !== undefined ? 'chat' : 'completion') : kind;
  // An agent API's body is checked as it is converted (agent-task.ts), after the model is known.
  if (endpoint === 'messages' || endpoint === 'responses') checkAgentBody(endpoint, body, limits);
  else validateBody(endpoint, body, limits);
  return { kind, endpoint, body };
}

export interface RoutedRequest<S extends ServedModel> {
  readonly target: S & { readonly loraName: string | undefined };
  readonly hints: RoutingHints;
  readonly queryOnly: boolean;
  /**
   * Top-level fields the engine's body has instead of the client's; undefined when it is the client's body.
   * `nvext` is removed (engines do not know it); a completion's `nvext.token_data` becomes its `prompt`.
   */
  readonly forwardFields: Readonly<Record<string, unknown>> | undefined;
  /** The preprocessing task, or why the prompt cannot be routed (answered after the model's availability). */
  readonly task: { readonly ok: true; readonly task: PreprocessTask } | { readonly ok: false; readonly error: unknown };
}

/**
 * The model, hints and prompt task of a parsed body; `source`, the client's bytes of it, where an agent body's tool_use
 * inputs keep their number literals (`1.0` as vLLM writes it; without it they are written from the parse).
 * @throws KvgateError KVG_ERR_MODEL_NOT_FOUND, KVG_ERR_INVALID_REQUEST, KVG_ERR_UNKNOWN_WORKER (from the lookup and the hints).
 */
export function routeRequestBody<S extends ServedModel>(
  parsed: ParsedBody,
  served: ReadonlyMap<string, S>,
  headers: IncomingHttpHeaders,
  source?: Uint8Array,
): RoutedRequest<S> {
  const { endpoint, body } = parsed;
  // `model` may name a LoRA adapter: the request then runs on its base model under that adapter
  // (`nvext.lora_name` is schema-checked to be a string when present).
  const loraHint = (body.nvext as { lora_name?: string } | undefined)?.lora_name;
  const target = resolveModel(served, body.model as string, loraHint);
  // Pins are checked against the configured workers of the model the request resolved to.
  const p = parseRoutingHints(body.nvext, headers, target.model.workers, target.model.clientPins);
  const hints = target.loraName === p.hints.loraName ? p.hints : { ...p.hints, loraName: target.loraName };
  let task: RoutedRequest<S>['task'];
  try {
    const { name: model, maxPromptTokens } = target.model;
    // The ids cross back from a preprocessing thread only where they are read: by a port that reads them, or in a
    // query's answer that shows them.
    const returnTokenIds = target.port.readsTokenIds !== false || answerShowsTokenIds(parsed.kind, p.queryOnly, body);
    task = {
      ok: true,
      task: promptTask({
        endpoint,
        body,
        model,
        maxPromptTokens,
        tokenData: p.tokenData,
        loraName: target.loraName,
        returnTokenIds,
        inlineSystem: target.model.anthropicInlineSystem,
        source,
      }),
    };
  } catch (error) {
    task = { ok: false, error };
  }
  let forwardFields: Record<string, unknown> | undefined;
  if (endpoint === 'completion' && p.tokenData !== undefined)
    forwardFields = { nvext: undefined, prompt: Array.from(p.tokenData) };
  else if (body.nvext !== undefined) forwardFields = { nvext: undefined };
  return { target, hints, queryOnly: p.queryOnly, forwardFields, task };
}
