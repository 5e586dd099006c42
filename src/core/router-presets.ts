/**
 * Named router presets: the peers' routers as values of kvgate's knobs (Dynamo's snake_case names over
 * `KV_ROUTER_DEFAULTS`). The one table both the gateway config (`router_preset`) and the replay
 * (`--compare dynamo,...`) read, so a preset means the same knobs wherever it is named.
 *
 * `kv` is kvgate's default (no knob changed: `KV_ROUTER_DEFAULTS`, prefill scale 4). `dynamo` is Dynamo
 * v1.5's defaults (prefill scale 1), `dynamo-agentic` its `--agentic` preset (overlap credit 2, prefill
 * load x4, 64 blocks per active request); both turn kvgate's own cache-pressure and KV-overflow terms off,
 * since Dynamo has none. `llm-d` is llm-d's weighted scorer with its recommended weights, prefix : queue :
 * KV utilisation = 2 : 2 : 1 (llm-d's docs); `lmetric` LMetric's product rule (Zhang et al., OSDI'26).
 */
import { kvRouterOptionsFromDynamo, type KvRouterOptions } from './config.js';

export const ROUTER_PRESETS = Object.freeze({
  kv: Object.freeze({}),
  dynamo: Object.freeze({
    overlap_score_credit: 1,
    prefill_load_scale: 1,
    decode_active_request_weight: 0,
    router_kv_pressure_weight: 0,
    router_kv_overflow_weight: 0,
  }),
  'dynamo-agentic': Object.freeze({
    overlap_score_credit: 2,
    prefill_load_scale: 4,
    decode_active_request_weight: 64,
    router_kv_pressure_weight: 0,
    router_kv_overflow_weight: 0,
  }),
  'llm-d': Object.freeze({
    router_prefix_scorer_weight: 2,
    router_queue_scorer_weight: 2,
    router_kv_utilization_scorer_weight: 1,
  }),
  lmetric: Object.freeze({ router_lmetric: true }),
}) satisfies Readonly<Record<string, Readonly<Record<string, unknown>>>>;

/** A preset's name: `kv` (kvgate's default) or a peer's router. */
export type RouterPreset = keyof typeof ROUTER_PRESETS;

/** Every preset name, `kv` first. */
export const ROUTER_PRESET_NAMES = Object.freeze(Object.keys(ROUTER_PRESETS) as RouterPreset[]);

/** True when `name` is a preset (own keys only: `constructor` is not one). */
export function isRouterPreset(name: string): name is RouterPreset {
  return Object.hasOwn(ROUTER_PRESETS, name);
}

/** A preset's knobs, Dynamo-named as the table holds them (a config file's or `--router-config`'s spelling). */
export function routerPresetKnobs(name: RouterPreset): Readonly<Record<string, unknown>> {
  return ROUTER_PRESETS[name];
}

/** A preset's knobs as `KvRouterOptions` (camelCase), ready to lay under the knobs an operator set. */
export function routerPresetOptions(name: RouterPreset): KvRouterOptions {
  return kvRouterOptionsFromDynamo(ROUTER_PRESETS[name]);
}
