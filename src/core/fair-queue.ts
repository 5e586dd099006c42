/**
 * The router queue across tenant classes: strict priority between class tiers, deficit round robin (DRR) between
 * the classes of one tier, round robin between the tenants of one class, and inside a tenant the order of
 * `RequestQueue` (policy key, then arrival). Dynamo's policy classes, with llm-d's per-tenant fairness inside a class.
 *
 * DRR: the backlogged classes of a tier take turns; a class's turn adds its weight to its deficit, and each request
 * it admits spends 1, so over a long run classes admit in proportion to their weights (each within one request of
 * its share per round) and every backlogged class is served once a round: no starvation inside a tier. A class
 * whose queue empties forfeits its deficit (DRR's rule: no credit saved while idle). A tier is served only while
 * every tier above it has nothing admissible: strict priority may starve a lower tier, by the operator's choice.
 *
 * Shedding (`victim`): when the queue holds its capacity, the class to shed is the lowest priority one, then the one
 * with the most queued requests per unit of weight (the most over its share), counting the newcomer in its own; in
 * that class, the tenant with the most queued; of that tenant, the request that would leave last. The newcomer is
 * itself the victim when its tenant is chosen (ties go against it): a full queue never trades one of a tenant's
 * requests for another of the same tenant's.
 *
 * Pure: no clock (arrival order comes from the caller's keys), no I/O. Cancellation is lazy, as in `RequestQueue`.
 */
import type { TenantHint } from '../common/index.js';
import { RequestQueue, type QueueEntry } from './queue.js';

/** A queued request's place: its payload, and the class and tenant it counts against. */
export interface FairItem<T> {
  readonly payload: T;
  readonly cls: ClassState<T>;
  readonly tenant: string;
}

export type FairEntry<T> = QueueEntry<FairItem<T>>;

/** Who a request is to the queue: a tenant of a class (`TenantHint` without the capacity). */
export type QueueClass = Pick<TenantHint, 'tenant' | 'class' | 'priority' | 'weight'>;

/** The class every request without a tenant belongs to. */
export const SHARED_CLASS: QueueClass = { tenant: 'other', class: 'default', priority: 0, weight: 1 };

class ClassState<T> {
  deficit = 0;
  /** Whether this turn's weight was added to the deficit (reset when the turn ends). */
  credited = false;
  pending = 0;
  readonly tenants = new Map<string, RequestQueue<FairItem<T>>>();
  /** Backlogged tenants, in turn order; `turn` is the next one's index. */
  readonly order: string[] = [];
  turn = 0;

  constructor(
    readonly name: string,
    public priority: number,
    public weight: number,
  ) {}

  /** The next tenant's best admissible request, tenants in turns. */
  take(admissible: (e: FairEntry<T>) => boolean): FairEntry<T> | undefined {
    for (let tried = 0; tried < this.order.length;) {
      if (this.turn >= this.order.length) this.turn = 0;
      const q = this.tenants.get(this.order[this.turn]!)!;
      if (q.pendingRequests === 0) {
        this.order.splice(this.turn, 1);
        continue;
      }
      const e = q.take(admissible);
      this.turn++;
      tried++;
      if (e !== undefined) return e;
    }
    return undefined;
  }
}

/** The classes of one priority, in DRR turn order (backlogged ones only); `turn` is the current one's index. */
interface Tier<T> {
  readonly priority: number;
  readonly ring: ClassState<T>[];
  turn: number;
}

export class FairQueue<T> {
  readonly #classes = new Map<string, ClassState<T>>();
  /** By priority, highest first. */
  #tiers: Tier<T>[] = [];
  #pending = 0;
  #pendingIsl = 0;

  get pendingRequests(): number {
    return this.#pending;
  }

  get pendingIslTokens(): number {
    return this.#pendingIsl;
  }

  /** Parks a request of `cls`; the class takes `cls`'s priority and weight (the latest config wins). */
  push(payload: T, cls: QueueClass, strictPriority: number, key: number, isl: number): FairEntry<T> {
    const c = this.#classOf(cls);
    let q = c.tenants.get(cls.tenant);
    if (q === undefined) c.tenants.set(cls.tenant, (q = new RequestQueue()));
    if (q.pendingRequests === 0 && !c.order.includes(cls.tenant)) c.order.push(cls.tenant);
    const tier = this.#tierOf(c.priority);
    if (c.pending === 0 && !tier.ring.includes(c)) tier.ring.push(c);
    c.pending++;
    this.#pending++;
    this.#pendingIsl += isl;
    return q.push({ payload, cls: c, tenant: cls.tenant }, '', strictPriority, key, isl);
  }

  /** Withdraws a waiting entry. False if it already left the queue. */
  cancel(e: FairEntry<T>): boolean {
    const q = e.payload.cls.tenants.get(e.payload.tenant);
    if (q === undefined || !q.cancel(e)) return false;
    this.#left(e);
    return true;
  }

  /** Admits entries (strict tiers, DRR inside a tier) while one is admissible. Returns how many. */
  drain(admissible: (e: FairEntry<T>) => boolean, admit: (e: FairEntry<T>) => void): number {
    let admitted = 0;
    for (;;) {
      let e: FairEntry<T> | undefined;
      for (const tier of this.#tiers) if ((e = this.#next(tier, admissible)) !== undefined) break;
      if (e === undefined) return admitted;
      this.#left(e);
      admit(e);
      admitted++;
    }
  }

  /**
   * What to shed so that a request of `incoming` fits a queue of `capacity`: nothing (undefined) while there is
   * room, `'incoming'` to refuse the newcomer, else the queued entry to take out (module comment: the order).
   */
  victim(incoming: QueueClass, capacity: number): 'incoming' | FairEntry<T> | undefined {
    if (this.#pending < capacity) return undefined;
    const mine = this.#classes.get(incoming.class);
    const load = (c: ClassState<T> | undefined, w: number, isMine: boolean): number =>
      ((c?.pending ?? 0) + (isMine ? 1 : 0)) / w;
    let victim: ClassState<T> | undefined = mine;
    let vPriority = incoming.priority;
    let vLoad = load(mine, incoming.weight, true);
    for (const c of this.#classes.values()) {
      if (c === mine || c.pending === 0) continue;
      const l = load(c, c.weight, false);
      if (c.priority < vPriority || (c.priority === vPriority && l > vLoad)) {
        victim = c;
        vPriority = c.priority;
        vLoad = l;
      }
    }
    let tenant = victim === mine ? incoming.tenant : undefined;
    let most = victim === mine ? (mine?.tenants.get(incoming.tenant)?.pendingRequests ?? 0) + 1 : 0;
    for (const [t, q] of victim?.tenants ?? []) {
      if (q.pendingRequests > most) {
        tenant = t;
        most = q.pendingRequests;
      }
    }
    if (victim === mine && tenant === incoming.tenant) return 'incoming';
    return victim!.tenants.get(tenant!)!.last();
  }

  /** Waiting requests by tenant (cancelled ones excluded). */
  pendingByTenant(): Map<string, number> {
    const out = new Map<string, number>();
    for (const c of this.#classes.values())
      for (const [t, q] of c.tenants) out.set(t, (out.get(t) ?? 0) + q.pendingRequests);
    return out;
  }

  #left(e: FairEntry<T>): void {
    e.payload.cls.pending--;
    this.#pending--;
    this.#pendingIsl -= e.isl;
  }

  /**
   * The DRR step of one tier: the class whose turn it is gives its next request while its deficit allows, then the
   * turn passes on. When it has nothing admissible right now, the turn stays (a probe that finds the workers busy
   * must not cost a class its turn) and another class's admissible request leaves out of turn, charged to that
   * class's deficit (it may go below zero and is paid back from its next turns): the queue stays work-conserving.
   */
  #next(tier: Tier<T>, admissible: (e: FairEntry<T>) => boolean): FairEntry<T> | undefined {
    while (tier.ring.length > 0) {
      if (tier.turn >= tier.ring.length) tier.turn = 0;
      const c = tier.ring[tier.turn]!;
      if (this.#idle(tier, c)) continue;
      if (!c.credited) {
        c.deficit += c.weight;
        c.credited = true;
      }
      if (c.deficit < 1) {
        c.credited = false;
        tier.turn++;
        continue;
      }
      const e = c.take(admissible);
      if (e !== undefined) {
        c.deficit -= 1;
        return e;
      }
      for (let i = 1; i < tier.ring.length; i++) {
        const o = tier.ring[(tier.turn + i) % tier.ring.length]!;
        if (o.pending === 0 || o.priority !== tier.priority) continue;
        const out = o.take(admissible);
        if (out !== undefined) {
          o.deficit -= 1;
          return out;
        }
      }
      return undefined;
    }
    return undefined;
  }

  /** Takes `c` out of the tier's ring when it has nothing queued (its credit forfeited) or a reload moved it. */
  #idle(tier: Tier<T>, c: ClassState<T>): boolean {
    if (c.pending > 0 && c.priority === tier.priority) return false;
    tier.ring.splice(tier.turn, 1);
    c.deficit = 0;
    c.credited = false;
    if (c.pending > 0) this.#tierOf(c.priority).ring.push(c);
    return true;
  }

  #classOf(cls: QueueClass): ClassState<T> {
    let c = this.#classes.get(cls.class);
    if (c === undefined) this.#classes.set(cls.class, (c = new ClassState(cls.class, cls.priority, cls.weight)));
    c.weight = cls.weight;
    c.priority = cls.priority;
    return c;
  }

  #tierOf(priority: number): Tier<T> {
    let t = this.#tiers.find((x) => x.priority === priority);
    if (t === undefined) {
      t = { priority, ring: [], turn: 0 };
      this.#tiers = [...this.#tiers, t].sort((a, b) => b.priority - a.priority);
    }
    return t;
  }
}
