/**
 * `EndpointOwners`: which listed pod owns each endpoint of the pool. Two listed pods can name one endpoint: a pod's
 * IP reused by its replacement while the old pod is still listed (still Ready and not yet marked for deletion, as
 * the API server may show a pod whose node went away). One engine answers on an `ip:port`, so the picker routes one
 * worker there: the newer pod's (the later `creationTimestamp`; for the same one, or none, the pod listed later; then
 * the name later in order, so that the choice is the same whatever the list's order). The others are shadowed:
 * listed, not routed, while their endpoint's owner is listed; when it leaves, the newest of them owns the endpoint.
 *
 * Each change is told: an endpoint handed over from one pod to another (a warn line while the pod it passed from is
 * still listed, an info line once it is gone), a pod shadowed without a handover (a warn line), and a shadowed pod
 * no longer listed (an info line); handovers and shadowings are counted by the caller.
 */
import type { Logger } from 'pino';
import type { PoolEndpoint } from '../fleet/index.js';

/** An endpoint whose owner changed: `from` (its owner until now) to `to`. */
export interface Handover {
  readonly endpoint: string;
  readonly from: string;
  readonly to: string;
}

export interface Ownership {
  /** The owner of each endpoint: the pods to route, by name. */
  readonly owners: Map<string, PoolEndpoint>;
  readonly handedOver: Handover[];
  /** Pods shadowed by this change (listed, not routed: a newer pod lists their endpoint), by name. */
  readonly shadowed: string[];
}

export class EndpointOwners {
  readonly #logger: Logger;
  /** pod name -> when the picker first listed it (a sequence), while it is listed: the newer of two of one time. */
  readonly #listedAt = new Map<string, number>();
  #nextListed = 0;
  /** endpoint -> the name of the pod that owns it, as of the last change. */
  #owners = new Map<string, string>();
  /** shadowed pod name -> its endpoint, as of the last change. */
  #shadowed = new Map<string, string>();

  constructor(logger: Logger) {
    this.#logger = logger;
  }

  /** What is kept, by structure (the picker's `footprint`): bounded by the pods listed now. */
  get sizes(): { listed: number; shadowed: number } {
    return { listed: this.#listedAt.size, shadowed: this.#shadowed.size };
  }

  /** The pods listed now: the owner of each endpoint, and what changed since the last list (told here). */
  apply(pods: readonly PoolEndpoint[]): Ownership {
    const names = new Set(pods.map((p) => p.name));
    for (const name of [...this.#listedAt.keys()]) if (!names.has(name)) this.#listedAt.delete(name);
    for (const p of pods) if (!this.#listedAt.has(p.name)) this.#listedAt.set(p.name, this.#nextListed++);
    const byEndpoint = new Map<string, PoolEndpoint>();
    for (const p of pods) {
      const held = byEndpoint.get(p.endpoint);
      if (held === undefined || this.#newer(p, held)) byEndpoint.set(p.endpoint, p);
    }
    const owners = new Map([...byEndpoint.values()].map((p) => [p.name, p]));
    const shadowed = new Map(pods.filter((p) => !owners.has(p.name)).map((p) => [p.name, p.endpoint]));
    const handedOver: Handover[] = [];
    for (const [endpoint, to] of byEndpoint) {
      const from = this.#owners.get(endpoint);
      if (from === undefined || from === to.name) continue;
      handedOver.push({ endpoint, from, to: to.name });
      this.#tellHandover(endpoint, from, to.name, shadowed.has(from));
    }
    const newlyShadowed: string[] = [];
    for (const [name, endpoint] of shadowed) {
      if (this.#shadowed.get(name) === endpoint) continue;
      newlyShadowed.push(name);
      // A pod a handover shadowed was told with it.
      if (!handedOver.some((h) => h.from === name && h.endpoint === endpoint))
        this.#logger.warn(
          { endpoint, pod: name, owner: byEndpoint.get(endpoint)!.name },
          `pod ${name} is listed with endpoint ${endpoint}, which the newer pod ${byEndpoint.get(endpoint)!.name} ` +
            `owns: ${name} is not routed while both are listed`,
        );
    }
    for (const [name, endpoint] of this.#shadowed)
      if (!names.has(name))
        this.#logger.info(
          { endpoint, pod: name },
          `pod ${name} (not routed: a newer pod owns its endpoint ${endpoint}) is no longer listed`,
        );
    this.#owners = new Map([...byEndpoint].map(([endpoint, p]) => [endpoint, p.name]));
    this.#shadowed = shadowed;
    return { owners, handedOver, shadowed: newlyShadowed };
  }

  /** True when `a` is newer than `b`: created later; else listed later; else named later. */
  #newer(a: PoolEndpoint, b: PoolEndpoint): boolean {
    const ca = Date.parse(a.created ?? '');
    const cb = Date.parse(b.created ?? '');
    if (!Number.isNaN(ca) && !Number.isNaN(cb) && ca !== cb) return ca > cb;
    const la = this.#listedAt.get(a.name)!;
    const lb = this.#listedAt.get(b.name)!;
    return la !== lb ? la > lb : a.name > b.name;
  }

  #tellHandover(endpoint: string, from: string, to: string, fromListed: boolean): void {
    const line = { endpoint, from, to };
    if (fromListed)
      this.#logger.warn(
        line,
        `endpoint ${endpoint} handed over from pod ${from} to pod ${to}: both are listed with it (an address reused ` +
          `while ${from} is still listed); ${to}, the newer, is routed there, ${from} is not while both are listed`,
      );
    else
      this.#logger.info(line, `endpoint ${endpoint} handed over from pod ${from} to pod ${to} (${from} is not listed)`);
  }
}
