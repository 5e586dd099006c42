/**
 * Which model a request's `model` names, and the LoRA adapter it runs under.
 * A client names an adapter either as `model` (vLLM's way: an adapter is a
 * model of its own in /v1/models, with its base model as `parent`) or as
 * `nvext.lora_name` next to the base model. Adapters are those a model's
 * port serves now (configured `lora_adapters`, or listed by its engines'
 * /v1/models) plus the configured ones, so a configured adapter whose workers
 * are all down gets the model's 503 rather than a 404.
 */
import type { ModelConfig } from '../config/index.js';
import { KvgateError } from '../errors/index.js';
import type { ServedModelConfig } from './inline-system-modes.js';
import type { ModelRouterPort } from './router-port.js';

export interface ModelTarget {
  readonly port: ModelRouterPort;
  readonly model: ServedModelConfig;
  /** The adapter the prompt is hashed under and the engine is asked for; undefined for the base model. */
  readonly loraName: string | undefined;
}

/**
 * What the lookup reads of a served model: its config's name and adapters, and the adapters its port serves
 * now. The gateway's ports, or a snapshot of them sent with a body parsed on a preprocessing thread.
 */
export interface Served {
  /** `readsTokenIds`: the router port's (router-port.ts); absent means true. */
  readonly port: { adapters(): readonly string[]; readonly readsTokenIds?: boolean | undefined };
  readonly model: Pick<ModelConfig, 'name' | 'loraAdapters'>;
}

function serves(s: Served, adapter: string): boolean {
  return s.model.loraAdapters.includes(adapter) || s.port.adapters().includes(adapter);
}

function notFound(what: string, param: string): never {
  throw new KvgateError(
    'KVG_ERR_MODEL_NOT_FOUND',
    `${what} is not served here; GET /v1/models lists the models and LoRA adapters`,
    { param },
  );
}

/** Each served entry's target for its base model, built once: a target is read, never written. */
const baseTargets = new WeakMap<Served, Served & { loraName: undefined }>();

function baseTarget<S extends Served>(s: S): S & { loraName: undefined } {
  let t = baseTargets.get(s) as (S & { loraName: undefined }) | undefined;
  if (t === undefined) {
    t = { ...s, loraName: undefined };
    baseTargets.set(s, t);
  }
  return t;
}

/**
 * @throws KvgateError KVG_ERR_MODEL_NOT_FOUND (no such model or adapter), KVG_ERR_INVALID_REQUEST
 *   (`model` names one adapter and `nvext.lora_name` another).
 */
export function resolveModel<S extends Served>(
  served: ReadonlyMap<string, S>,
  name: string,
  loraHint: string | undefined,
): S & { loraName: string | undefined } {
  const base = served.get(name);
  if (base !== undefined) {
    if (loraHint !== undefined && !serves(base, loraHint))
      notFound(`LoRA adapter ${JSON.stringify(loraHint)} of model ${name}`, 'nvext.lora_name');
    return loraHint === undefined ? baseTarget(base) : { ...base, loraName: loraHint };
  }
  for (const s of served.values()) {
    if (!serves(s, name)) continue;
    if (loraHint !== undefined && loraHint !== name) {
      throw new KvgateError(
        'KVG_ERR_INVALID_REQUEST',
        `model ${JSON.stringify(name)} is a LoRA adapter and nvext.lora_name names another (${JSON.stringify(loraHint)}); name one adapter`,
        { param: 'nvext.lora_name' },
      );
    }
    return { ...s, loraName: name };
  }
  return notFound(`model ${JSON.stringify(name)}`, 'model');
}

/** `/v1/models` entries of a servable model: the model, then each adapter it serves now with the model as `parent`. */
export function modelEntries(port: ModelRouterPort, created: number): Record<string, unknown>[] {
  const entry = (id: string, parent: string | null): Record<string, unknown> => ({
    id,
    object: 'model',
    created,
    owned_by: 'kvgate',
    ...(parent !== null ? { root: parent, parent } : {}),
  });
  return [entry(port.model, null), ...port.adapters().map((a) => entry(a, port.model))];
}
