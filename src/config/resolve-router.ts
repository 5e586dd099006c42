/**
 * The `router` sections (global and per model): Dynamo's snake_case knob
 * names mapped to the core's fields, each value checked on its own so every
 * bad knob is reported, then the merged set resolved with the core's
 * cross-field rules. This module keeps no knob list of its own.
 *
 * `router_preset` names one of core's presets (`kv`, `dynamo`, ...): the
 * model's own, else the global one, else `kv`. Its knobs lie under every knob
 * the operator set (global or per model), so an explicit knob always wins over
 * the preset's value for it.
 */
import {
  KV_ROUTER_CONFIG_FIELDS,
  ROUTER_PRESET_NAMES,
  resolveKvRouterConfig,
  routerPresetOptions,
  type KvRouterConfig,
  type KvRouterOptions,
  type RouterPreset,
} from '../core/index.js';
import { isKvgateError } from '../errors/index.js';
import { ConfigReader, closestKey, type FieldPath } from './reader.js';

/** Dynamo snake_case knob name -> KvRouterOptions field (from the core's table). */
const KNOB_BY_DYNAMO_NAME: ReadonlyMap<string, string> = new Map(
  Object.entries(KV_ROUTER_CONFIG_FIELDS).map(([field, spec]) => [spec.dynamo, field]),
);
const DYNAMO_NAME_BY_KNOB: ReadonlyMap<string, string> = new Map(
  Object.entries(KV_ROUTER_CONFIG_FIELDS).map(([field, spec]) => [field, spec.dynamo]),
);

/** The key naming a preset inside a `router` section (not a knob of core's table). */
const PRESET_KEY = 'router_preset';

/** The knobs of one `router` section, and where in the document each was set. */
export interface RouterKnobs {
  options: KvRouterOptions;
  origin: Map<string, FieldPath>;
  /** The section's `router_preset`, when it names one. */
  preset?: RouterPreset;
}

/** Validates the `router` knobs of one section (Dynamo names) and returns them as options. */
export function readRouterKnobs(r: ConfigReader | undefined): RouterKnobs {
  const options: Record<string, unknown> = {};
  const origin = new Map<string, FieldPath>();
  if (r === undefined) return { options, origin };
  const known = [PRESET_KEY, ...KNOB_BY_DYNAMO_NAME.keys()];
  const preset =
    r.node[PRESET_KEY] === undefined || r.node[PRESET_KEY] === null
      ? undefined
      : r.oneOf<RouterPreset | ''>(PRESET_KEY, ROUTER_PRESET_NAMES, '');
  for (const [name, value] of Object.entries(r.node)) {
    if (name === PRESET_KEY) continue;
    const field = KNOB_BY_DYNAMO_NAME.get(name);
    if (field === undefined) {
      const hint = closestKey(name, known);
      r.problem(name, `unknown router knob${hint !== undefined ? ` (did you mean "${hint}"?)` : ''}`);
      continue;
    }
    // Check the value on its own first, so every bad knob is reported, not just the first.
    try {
      resolveKvRouterConfig({ [field]: value } as KvRouterOptions);
    } catch (err) {
      if (!isKvgateError(err, 'KVG_ERR_INVALID_CONFIG')) throw err;
      // Rules between knobs ("requires ...") are checked on the merged set below.
      const reason = String(err.detail?.reason ?? err.message);
      if (!/require/.test(reason)) {
        r.problem(name, reason);
        continue;
      }
    }
    options[field] = value;
    origin.set(field, [...r.path, name]);
  }
  return { options: options as KvRouterOptions, origin, ...(preset ? { preset } : {}) };
}

/** The preset a model's router is laid over: the model's own, else the global section's, else `kv`. */
export function routerPresetOf(global: RouterKnobs, local: RouterKnobs): RouterPreset {
  return local.preset ?? global.preset ?? 'kv';
}

/** Resolves the preset's knobs under the merged knobs (global then model) with the core's cross-field rules. */
export function resolveRouter(
  root: ConfigReader,
  global: RouterKnobs,
  local: RouterKnobs,
  fallbackPath: FieldPath,
): KvRouterConfig {
  const preset = routerPresetOptions(routerPresetOf(global, local));
  const merged = { ...preset, ...global.options, ...local.options } as KvRouterOptions;
  return resolveMerged(root, merged, [global, local], fallbackPath);
}

function resolveMerged(
  root: ConfigReader,
  merged: KvRouterOptions,
  [global, local]: readonly [RouterKnobs, RouterKnobs],
  fallbackPath: FieldPath,
): KvRouterConfig {
  try {
    return resolveKvRouterConfig(merged);
  } catch (err) {
    if (!isKvgateError(err, 'KVG_ERR_INVALID_CONFIG')) throw err;
    const field = String(err.detail?.field ?? '').replace(/\[.*$/, '');
    const path = local.origin.get(field) ?? global.origin.get(field) ?? fallbackPath;
    const name = DYNAMO_NAME_BY_KNOB.get(field);
    const reason = String(err.detail?.reason ?? err.message);
    // The core names camelCase fields inside its reasons; the file uses Dynamo's names.
    let text = reason;
    for (const [f, d] of DYNAMO_NAME_BY_KNOB) text = text.replaceAll(f, d);
    root.problemAt(path, name !== undefined && path === fallbackPath ? `${name}: ${text}` : text);
    // Keep the other knobs (so later rules such as "KV events need endpoints" judge what
    // the operator wrote); this config is never used, since a problem was recorded.
    const rest: Record<string, unknown> = { ...merged };
    delete rest[field];
    try {
      return resolveKvRouterConfig(rest as KvRouterOptions);
    } catch {
      return resolveKvRouterConfig({});
    }
  }
}
