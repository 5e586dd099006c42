/**
 * Routing policies a replay compares, and the one interface the simulator
 * drives them through.
 *
 * A policy spec is `kv` (the KV router with default config), a KV variant
 * from a `--router-config` JSON object (named after its fields, e.g.
 * `kv[router_temperature=0.5]`), or one of the load-based modes of
 * `src/routing/push/simple-routers.ts`: round-robin, random, power-of-two,
 * least-loaded, or a peer's router by its preset name (`dynamo`,
 * `dynamo-agentic`, `llm-d`, `lmetric`: core's `router-presets.ts`, the table
 * the gateway config's `router_preset` reads too).
 *
 * Any of these names followed by `+dynamo-order` (`kv+dynamo-order`, `dynamo+dynamo-order`) runs a P/D
 * topology in Dynamo's order (the decode worker routed once the prefill is on its way) instead of the
 * gateway's (the decode slot booked before the prefill): `offline-disagg.ts` says how they differ.
 *
 * `ReplayRouter` is what a policy looks like to a replay: route a request
 * among candidate workers (booking it), hear when its prefill completed and
 * when it finished, and receive the engines' KV events. Simple policies book
 * in-flight requests per worker (their `LoadSource`), exactly as the live
 * push router does.
 */
import type { RouterMode, Rng, SimpleRouterMode, WorkerRank } from '../common/index.js';
import {
  isRouterPreset,
  kvRouterOptionsFromDynamo,
  resolveKvRouterConfig,
  ROUTER_PRESET_NAMES,
  routerPresetKnobs,
  routerPresetOptions,
  type KvRouterOptions,
} from '../core/index.js';
import { KvgateError } from '../errors/index.js';
import type { KvEvent } from '../mocker/index.js';
import { createSimpleRouter, type SimpleRouter } from '../routing/index.js';
import type { IndexUse } from './results.js';

const SIMPLE_POLICIES: readonly SimpleRouterMode[] = ['round-robin', 'random', 'power-of-two', 'least-loaded'];

/**
 * When a P/D request's decode worker is booked: `kvgate`, before its prefill is routed (the gateway's
 * decode slot); `dynamo`, once the prefill is on its way (Dynamo's PrefillRouter).
 */
export type DisaggOrder = 'kvgate' | 'dynamo';

/** The `--compare` suffix that gives a policy Dynamo's P/D order. */
const DYNAMO_ORDER_SUFFIX = '+dynamo-order';

export type PolicySpec = (
  | {
      readonly kind: 'kv';
      readonly name: string;
      /** `kv-one-group`: a hybrid model's other KV-cache groups ignored (kvgate before hybrid support), for comparison. */
      readonly oneGroup?: boolean;
      /** `kv-step`: the time-unit cost from the engines' step profile (`--perf-profile`), not the block-counting one. */
      readonly stepCost?: boolean;
      readonly options: KvRouterOptions;
      /** As given (Dynamo snake_case). */ readonly dynamo: Readonly<Record<string, unknown>>;
    }
  | { readonly kind: 'simple'; readonly name: string; readonly mode: SimpleRouterMode }
) & {
  /** Absent: the gateway's order (`kvgate`). */
  readonly disaggOrder?: DisaggOrder;
};

/** The gateway's `router_mode` a policy runs as. */
export function routerModeOf(policy: PolicySpec): RouterMode {
  return policy.kind === 'kv' ? 'kv' : policy.mode;
}

/** The peers' routers as named KV policies: core's presets but `kv`, which the replay names itself. */
export const PRESET_POLICY_NAMES: readonly string[] = ROUTER_PRESET_NAMES.filter((n) => n !== 'kv');
/** The time-unit cost's knobs: prefill scale 1, since its milliseconds already weigh prefill against decode. */
const KV_STEP = Object.freeze({ prefill_load_scale: 1 });

/** `kv[field=value,...]` from Dynamo-named fields, in the order given. */
function kvVariantName(dynamo: Readonly<Record<string, unknown>>): string {
  const parts = Object.entries(dynamo).map(([k, v]) => `${k}=${typeof v === 'string' ? v : JSON.stringify(v)}`);
  return parts.length === 0 ? 'kv' : `kv[${parts.join(',')}]`;
}

/**
 * A `--compare` name without the order suffix.
 * @throws KvgateError KVG_ERR_INVALID_ARGUMENT for an unknown name.
 */
function namedPolicy(name: string): PolicySpec {
  if (name === 'kv') return { kind: 'kv', name: 'kv', options: {}, dynamo: {} };
  if (name === 'kv-one-group') return { kind: 'kv', name, options: {}, dynamo: {}, oneGroup: true };
  if (name === 'kv-step')
    return { kind: 'kv', name, options: kvRouterOptionsFromDynamo(KV_STEP), dynamo: KV_STEP, stepCost: true };
  if (isRouterPreset(name))
    return { kind: 'kv', name, options: routerPresetOptions(name), dynamo: routerPresetKnobs(name) };
  if ((SIMPLE_POLICIES as readonly string[]).includes(name))
    return { kind: 'simple', name, mode: name as SimpleRouterMode };
  throw new KvgateError(
    'KVG_ERR_INVALID_ARGUMENT',
    `unknown policy '${name}': expected kv, kv-one-group, kv-step, ` +
      `${[...PRESET_POLICY_NAMES, ...SIMPLE_POLICIES].join(', ')}, each optionally followed by ${DYNAMO_ORDER_SUFFIX} ` +
      '(KV variants come from --router-config)',
  );
}

/**
 * Parses `--compare` names and `--router-config` JSON objects (each adds a KV
 * variant; Dynamo's snake_case field names, or kvgate's camelCase).
 * @throws KvgateError KVG_ERR_INVALID_ARGUMENT for unknown policy names, bad JSON, or duplicates;
 *   KVG_ERR_INVALID_CONFIG for invalid router fields (named).
 */
export function parsePolicies(compare: readonly string[], routerConfigs: readonly string[] = []): PolicySpec[] {
  const out: PolicySpec[] = [];
  const add = (p: PolicySpec): void => {
    if (out.some((q) => q.name === p.name))
      throw new KvgateError('KVG_ERR_INVALID_ARGUMENT', `policy ${p.name} is listed twice`);
    out.push(p);
  };
  for (const raw of compare) {
    const name = raw.trim();
    if (name === '') continue;
    const base = name.endsWith(DYNAMO_ORDER_SUFFIX) ? name.slice(0, -DYNAMO_ORDER_SUFFIX.length) : name;
    const p = namedPolicy(base);
    add(base === name ? p : { ...p, name, disaggOrder: 'dynamo' });
  }
  for (const json of routerConfigs) {
    let parsed: unknown;
    try {
      parsed = JSON.parse(json);
    } catch (err) {
      throw new KvgateError(
        'KVG_ERR_INVALID_ARGUMENT',
        `--router-config is not valid JSON: ${err instanceof Error ? err.message : String(err)}`,
      );
    }
    if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
      throw new KvgateError(
        'KVG_ERR_INVALID_ARGUMENT',
        '--router-config must be a JSON object such as {"router_temperature": 0.5}',
      );
    }
    const record = parsed as Record<string, unknown>;
    // Accept both spellings: Dynamo's snake_case and kvgate's camelCase.
    const snake: Record<string, unknown> = {};
    const camel: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(record)) (k.includes('_') ? snake : camel)[k] = v;
    const options: KvRouterOptions = { ...kvRouterOptionsFromDynamo(snake), ...(camel as KvRouterOptions) };
    resolveKvRouterConfig(options);
    add({ kind: 'kv', name: kvVariantName(record), options, dynamo: record });
  }
  if (out.length === 0) throw new KvgateError('KVG_ERR_INVALID_ARGUMENT', 'no policy to replay');
  return out;
}

/** A request as a router sees it in a replay. */
export interface RouteRequest {
  /** Unique among this router's in-flight requests. */
  readonly key: string;
  readonly tokens: readonly number[];
  readonly expectedOutputTokens: number;
  /** The router replica the front door gave it (0 with a single router). */
  readonly replica?: number;
}

export interface RouteChoice {
  readonly workerId: number;
  /** The router's predicted cached prompt tokens on that worker (overlap x block size); null for policies that do not predict. */
  readonly predictedCachedTokens: number | null;
}

/** One routing pool's router (aggregated: all engines; P/D: one for prefill, one for decode). */
export interface ReplayRouter {
  readonly policy: string;
  /**
   * Chooses a worker among `candidates` and books the request there. A
   * promise when the router parked the request in its queue: it settles when
   * load drains (during a later `prefillCompleted`, `finished` or `tick`).
   * @throws KvgateError when the policy cannot route (e.g. every worker overloaded); the replay counts the request as failed.
   */
  route(req: RouteRequest, candidates: readonly number[]): RouteChoice | Promise<RouteChoice>;
  /** The request's first token came back (its prompt load is gone). */
  prefillCompleted(key: string): void;
  /** The request has generated `produced` tokens so far (output-block tracking, when the policy does it). */
  outputTokens(key: string, produced: number): void;
  /** The request ended (normally or not); its booking is released. */
  finished(key: string): void;
  /** KV events an engine published, in order, at the time they become visible to the router. */
  applyKvEvents(workerId: number, events: readonly KvEvent[]): void;
  /** Periodic housekeeping (expiry, queue drain); the replay calls it every virtual second. */
  tick(): void;
  /** Virtual time of the router's own next event (replica sync deliveries), if it has any. */
  nextEventTime?(): number | undefined;
  /** Runs the router's own events due by `t`. */
  runUntil?(t: number): void;
  /** What its prefix index held so far (kv policies: `IndexUse`); absent, or undefined, for a router without one. */
  indexUse?(): IndexUse | undefined;
}

/** Load-based modes: the choice depends only on the router's own count of in-flight requests per worker. */
export class SimpleReplayRouter implements ReplayRouter {
  readonly policy: string;
  readonly #router: SimpleRouter;
  readonly #active = new Map<number, number>();
  readonly #booked = new Map<string, number>();
  #candidates: WorkerRank[] = [];
  #candidateKey = '';

  constructor(mode: SimpleRouterMode, rng: Rng) {
    this.policy = mode;
    this.#router = createSimpleRouter(mode, {
      rng,
      load: { activeRequests: (slot) => this.#active.get(slot.workerId) ?? 0 },
    });
  }

  route(req: RouteRequest, candidates: readonly number[]): RouteChoice {
    const key = candidates.join(',');
    if (key !== this.#candidateKey) {
      this.#candidates = candidates.map((workerId) => ({ workerId, dpRank: 0 }));
      this.#candidateKey = key;
    }
    const c = this.#router.select(this.#candidates);
    this.#active.set(c.workerId, (this.#active.get(c.workerId) ?? 0) + 1);
    this.#booked.set(req.key, c.workerId);
    return { workerId: c.workerId, predictedCachedTokens: null };
  }

  prefillCompleted(_key: string): void {
    // In-flight counts only change at booking and release.
  }

  outputTokens(_key: string, _produced: number): void {
    // Likewise.
  }

  finished(key: string): void {
    const w = this.#booked.get(key);
    if (w === undefined) return;
    this.#booked.delete(key);
    this.#active.set(w, this.#active.get(w)! - 1);
  }

  applyKvEvents(_workerId: number, _events: readonly KvEvent[]): void {
    // Load-based policies ignore cache state.
  }

  tick(): void {
    // Nothing expires: bookings are released by `finished`.
  }

  /** In-flight requests booked on a worker. */
  activeRequests(workerId: number): number {
    return this.#active.get(workerId) ?? 0;
  }
}

/**
 * The name a policy's routers are seeded by: without the order suffix, so `kv` and `kv+dynamo-order` draw the same
 * random numbers and differ only by the order.
 */
export function seedName(policy: PolicySpec): string {
  return policy.disaggOrder !== undefined && policy.name.endsWith(DYNAMO_ORDER_SUFFIX)
    ? policy.name.slice(0, -DYNAMO_ORDER_SUFFIX.length)
    : policy.name;
}

/** A deterministic per-policy seed: the same policy name and run seed always give the same RNG stream. */
export function policySeed(seed: number, name: string): number {
  let h = (seed ^ 0x811c9dc5) >>> 0;
  for (let i = 0; i < name.length; i++) h = Math.imul(h ^ name.charCodeAt(i), 0x01000193) >>> 0;
  return h;
}
