/**
 * `EndpointOwners`: which listed pod owns each endpoint. Two listed pods can name one endpoint: a pod's IP reused by
 * its replacement while the old pod is still listed (still Ready and not yet gone, as the API server may show a pod
 * whose node went away, or a terminating pod of a Service that publishes not-ready addresses). One engine answers on
 * an `ip:port`, so one worker is routed there: the newer pod's. Newer is, in order: not terminating (over a pod the
 * API marks terminating); created later (`creationTimestamp`, where the source knows it); listed later (first seen
 * later by this process); the name later in order, so that the choice is the same whatever the list's order. The
 * others are shadowed: listed, not routed, while their endpoint's owner is listed; when it leaves, the newest of them
 * owns the endpoint (the source lists it as serving there: its health probe decides whether it is routed).
 *
 * Shared by `kvgate picker` (an InferencePool's pods) and the Kubernetes source of `kvgate serve` (a Service's
 * EndpointSlices). Each change is told: an endpoint handed over from one pod to another (a warn line while the pod it
 * passed from is still listed, an info line once it is gone), a pod shadowed without a handover (a warn line), and a
 * shadowed pod no longer listed (an info line); handovers and shadowings are counted by the caller.
 */
import type { Logger } from 'pino';

/** A listed pod as `EndpointOwners` reads it. */
export interface OwnedEndpoint {
  /** The pod's name (or, where the source names no pod, the address itself). */
  readonly name: string;
  /** `ip:port` (`[ip]:port` for IPv6). */
  readonly endpoint: string;
  /** The pod's `creationTimestamp` (RFC 3339), where the source knows it. */
  readonly created?: string | undefined;
  /** True when the API marks the pod terminating (an EndpointSlice's `conditions.terminating`). */
  readonly terminating?: boolean | undefined;
}

/** An endpoint whose owner changed: `from` (its owner until now) to `to`. */
export interface Handover {
  readonly endpoint: string;
  readonly from: string;
  readonly to: string;
}

export interface Ownership<P extends OwnedEndpoint> {
  /** The owner of each endpoint: the pods to route, by name. */
  readonly owners: Map<string, P>;
  readonly handedOver: Handover[];
  /** Pods shadowed by this change (listed, not routed: a newer pod lists their endpoint), by name. */
  readonly shadowed: string[];
}

export class EndpointOwners<P extends OwnedEndpoint = OwnedEndpoint> {
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
  apply(pods: readonly P[]): Ownership<P> {
    const names = new Set(pods.map((p) => p.name));
    for (const name of [...this.#listedAt.keys()]) if (!names.has(name)) this.#listedAt.delete(name);
    for (const p of pods) if (!this.#listedAt.has(p.name)) this.#listedAt.set(p.name, this.#nextListed++);
    const byEndpoint = new Map<string, P>();
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

  /** True when `a` is newer than `b`: not terminating over terminating; else created, listed, named later. */
  #newer(a: P, b: P): boolean {
    if ((a.terminating === true) !== (b.terminating === true)) return b.terminating === true;
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
