/**
 * Tenants at the edge: who a request belongs to, and whether its tenant's rate limits let it in.
 *
 * Who: the tenant whose `api_keys` hold the request's key; else, with `tenants.header`, the declared tenant that
 * header names; else `other` (every undeclared tenant, one shared set of buckets and one metric label: the label
 * set stays bounded by the config). The key wins over the header: a client cannot claim another tenant's class by
 * a header while its key names its own.
 *
 * Rate limits (per tenant, from its class), each refusal a 429 KVG_ERR_RATE_LIMITED with a Retry-After of the wait
 * until the request would fit:
 * - a request bucket, spent by one as a request arrives (`arrive`), before its body is parsed or its prompt
 *   tokenized: a tenant over its request rate costs the gateway no preprocessing, whatever its bodies hold. A request
 *   that fails later (a bad body, the token bucket) has spent it: the rate counts the requests a tenant sends;
 * - a prompt-token bucket, spent by the prompt's tokens at admission (`admit`), once they are known; output tokens
 *   are not charged. A prompt larger than the bucket itself never fits: it is refused with no Retry-After worth
 *   waiting for (detail `tokenBurst`).
 */
import { createHash } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import type { TenantHint } from '../common/index.js';
import { OTHER_TENANT, type TenantClassConfig, type TenantsConfig } from '../config/index.js';
import { TokenBucket } from '../core/index.js';
import { KvgateError, isKvgateError } from '../errors/index.js';
import type { KvgateMetrics } from '../metrics/index.js';
import { boundEnginePriority, boundPriorityJump, type PriorityLimitAction } from './client-priority.js';
import type { PreparedRequest } from './router-port.js';

/** A request's tenant: its hint for the router queue, and the class whose limits apply. */
export interface Tenant {
  readonly hint: TenantHint;
  readonly limits: TenantClassConfig;
}

const digest = (key: string): string => createHash('sha256').update(key).digest('hex');

/** A 429's Retry-After for a bucket's wait (ms): whole seconds, at least 1. */
const retryAfterSeconds = (waitMs: number): number => Math.max(1, Math.ceil(waitMs / 1000));

interface Buckets {
  requests: TokenBucket | undefined;
  tokens: TokenBucket | undefined;
}

export class TenantDirectory {
  #config!: TenantsConfig;
  /** SHA-256 (hex) of a key -> its tenant's name: the keys themselves are not kept. */
  #byKey = new Map<string, string>();
  #tenants = new Map<string, Tenant>();
  /** Per tenant name; kept across reloads (a reload changes the limits, not what was spent). */
  readonly #buckets = new Map<string, Buckets>();
  readonly #now: () => number;
  readonly #metrics: KvgateMetrics | undefined;

  constructor(config: TenantsConfig, metrics?: KvgateMetrics, now: () => number = () => performance.now()) {
    this.#now = now;
    this.#metrics = metrics;
    this.reconfigure(config);
  }

  /** Every tenant label `/metrics` may show: the declared tenants and `other`. */
  get labels(): string[] {
    return [...this.#tenants.keys()];
  }

  /** New classes and members; whole or not at all (the maps are built before any is replaced). */
  reconfigure(config: TenantsConfig): void {
    const classes = new Map(config.classes.map((c) => [c.name, c]));
    const tenant = (name: string, cls: string): Tenant => {
      const limits = classes.get(cls)!;
      const { priority, weight } = limits;
      return {
        hint: { tenant: name, class: cls, priority, weight, queueLimitPerWorker: config.queueLimitPerWorker },
        limits,
      };
    };
    const tenants = new Map(config.members.map((m) => [m.name, tenant(m.name, m.class)]));
    tenants.set(OTHER_TENANT, tenant(OTHER_TENANT, config.defaultClass));
    this.#config = config;
    this.#tenants = tenants;
    // Every declared tenant's series exist at zero, so rate() sees a tenant before its first refusal.
    const m = this.#metrics;
    if (m !== undefined) {
      for (const t of this.#tenants.keys()) {
        for (const c of [m.tenantAdmitted, m.tenantRateLimited, m.tenantShed]) c.labels({ tenant: t }).inc(0);
        m.tenantQueued.labels({ tenant: t }).inc(0);
      }
    }
    this.#byKey = new Map();
    for (const m of config.members) for (const k of m.apiKeys) this.#byKey.set(digest(k), m.name);
    const now = this.#now();
    for (const [name, b] of this.#buckets) {
      const t = this.#tenants.get(name);
      if (t === undefined) this.#buckets.delete(name);
      else this.#buckets.set(name, this.#bucketsOf(t.limits, b, now));
    }
  }

  /** The tenant of a request with `credential` (`Bearer <key>` or undefined) and `headers`. */
  of(credential: string | undefined, headers: IncomingHttpHeaders): Tenant {
    const m = credential !== undefined && this.#byKey.size > 0 ? /^Bearer\s+(\S+)\s*$/i.exec(credential) : null;
    const byKey = m !== null ? this.#byKey.get(digest(m[1]!)) : undefined;
    if (byKey !== undefined) return this.#tenants.get(byKey)!;
    const h = this.#config.header;
    const named = h !== undefined ? headers[h] : undefined;
    const t = typeof named === 'string' && named !== OTHER_TENANT ? this.#tenants.get(named) : undefined;
    return t ?? this.#tenants.get(OTHER_TENANT)!;
  }

  /**
   * A request of `t` has arrived: spends one from its request bucket, before anything is done with its body.
   * @throws KvgateError KVG_ERR_RATE_LIMITED (429) with `retryAfterSeconds` when the bucket is short.
   */
  arrive(t: Tenant): void {
    const requests = this.#bucketsFor(t)?.requests;
    if (requests === undefined) return;
    const wait = requests.wait(1, this.#now());
    if (wait > 0) {
      this.#metrics?.tenantRateLimited.labels({ tenant: t.hint.tenant }).inc();
      throw new KvgateError(
        'KVG_ERR_RATE_LIMITED',
        `tenant ${t.hint.tenant} is over its rate limit (${t.limits.requestRate} requests/s)`,
        { tenant: t.hint.tenant, retryAfterSeconds: retryAfterSeconds(wait) },
      );
    }
    requests.spend(1);
  }

  /**
   * Lets an arrived request's prompt of `promptTokens` in under its tenant's token rate, spending from its bucket.
   * @throws KvgateError KVG_ERR_RATE_LIMITED (429) with `retryAfterSeconds` (or `tokenBurst`) when the bucket is short.
   */
  admit(t: Tenant, promptTokens: number): void {
    try {
      this.#spendTokens(t, promptTokens);
    } catch (err) {
      this.#metrics?.tenantRateLimited.labels({ tenant: t.hint.tenant }).inc();
      throw err;
    }
    this.#metrics?.tenantAdmitted.labels({ tenant: t.hint.tenant }).inc();
  }

  /**
   * `prepared` with the priorities its client asked for bounded by `t`'s class (client-priority.ts), and `t` as
   * its tenant; each bound applied is counted against `t`.
   * @throws KvgateError KVG_ERR_INVALID_REQUEST for a `priority` that is not an integer where the class forwards one.
   */
  bound(t: Tenant, prepared: PreparedRequest): PreparedRequest {
    const count = (hint: string) => (action: PriorityLimitAction) =>
      this.#metrics?.tenantPriorityLimited.labels({ tenant: t.hint.tenant, hint, action }).inc();
    const body = boundEnginePriority(prepared.body, t.limits, count('engine_priority'));
    const hints = boundPriorityJump(prepared.hints, t.limits, count('priority_jump'));
    return { ...prepared, body, hints: { ...hints, tenant: t.hint } };
  }

  /** Counts `err` against `t` when it is the router queue shedding the request. */
  noteFailure(t: Tenant, err: unknown): void {
    if (isKvgateError(err) && err.code === 'KVG_ERR_QUEUE_SHED')
      this.#metrics?.tenantShed.labels({ tenant: t.hint.tenant }).inc();
  }

  #spendTokens(t: Tenant, promptTokens: number): void {
    const tokens = this.#bucketsFor(t)?.tokens;
    if (tokens === undefined) return;
    const { limits, hint } = t;
    const wait = tokens.wait(promptTokens, this.#now());
    if (wait === Infinity) {
      throw new KvgateError(
        'KVG_ERR_RATE_LIMITED',
        `the prompt's ${promptTokens} tokens are more than tenant ${hint.tenant}'s token bucket holds (${limits.tokenBurst})`,
        { tenant: hint.tenant, tokenBurst: limits.tokenBurst },
      );
    }
    if (wait > 0) {
      throw new KvgateError(
        'KVG_ERR_RATE_LIMITED',
        `tenant ${hint.tenant} is over its rate limit (${limits.tokenRate} prompt tokens/s)`,
        { tenant: hint.tenant, retryAfterSeconds: retryAfterSeconds(wait) },
      );
    }
    tokens.spend(promptTokens);
  }

  /** The buckets of `t`'s tenant (made on first use), or undefined when its class has no rate limits. */
  #bucketsFor(t: Tenant): Buckets | undefined {
    const { limits, hint } = t;
    if (limits.requestRate === undefined && limits.tokenRate === undefined) return undefined;
    let b = this.#buckets.get(hint.tenant);
    if (b === undefined) this.#buckets.set(hint.tenant, (b = this.#bucketsOf(limits, undefined, this.#now())));
    return b;
  }

  #bucketsOf(c: TenantClassConfig, prev: Buckets | undefined, now: number): Buckets {
    const bucket = (rate: number | undefined, burst: number, old: TokenBucket | undefined): TokenBucket | undefined => {
      if (rate === undefined) return undefined;
      if (old === undefined) return new TokenBucket(rate, burst, now);
      old.reset(rate, burst, now);
      return old;
    };
    return {
      requests: bucket(c.requestRate, c.requestBurst, prev?.requests),
      tokens: bucket(c.tokenRate, c.tokenBurst, prev?.tokens),
    };
  }
}
