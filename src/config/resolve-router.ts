/**
 * The `router` sections (global and per model): Dynamo's snake_case knob
 * names mapped to the core's fields, each value checked on its own so every
 * bad knob is reported, then the merged set resolved with the core's
 * cross-field rules. This module keeps no knob list of its own.
 */
import {
  KV_ROUTER_CONFIG_FIELDS,
  resolveKvRouterConfig,
  type KvRouterConfig,
  type KvRouterOptions,
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

/** The knobs of one `router` section, and where in the document each was set. */
export interface RouterKnobs {
  options: KvRouterOptions;
  origin: Map<string, FieldPath>;
}

/** Validates the `router` knobs of one section (Dynamo names) and returns them as options. */
export function readRouterKnobs(r: ConfigReader | undefined): RouterKnobs {
  const options: Record<string, unknown> = {};
  const origin = new Map<string, FieldPath>();
  if (r === undefined) return { options, origin };
  const known = [...KNOB_BY_DYNAMO_NAME.keys()];
  for (const [name, value] of Object.entries(r.node)) {
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
  return { options: options as KvRouterOptions, origin };
}

/** Resolves merged knobs (global then model) with the core's cross-field rules. */
export function resolveRouter(
  root: ConfigReader,
  global: RouterKnobs,
  local: RouterKnobs,
  fallbackPath: FieldPath,
): KvRouterConfig {
  const merged = { ...global.options, ...local.options } as KvRouterOptions;
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
