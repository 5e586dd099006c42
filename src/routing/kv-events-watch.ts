/**
 * `KvEventsWatch`: what an operator sees of a pool's KV-event liveness (the events' `EventLiveness`), one worker at a
 * time: the `kvgate_worker_kv_events_live` gauge, and each transition logged and counted
 * (`kvgate_worker_kv_events_transitions_total`): live, stale (silent while serving after events came), silent (no
 * event since the worker joined, though requests were sent: a wrong endpoint, an engine that publishes none). The
 * gateway's worker watch (a model's workers) and the endpoint picker (a pool's pods) both tick one, so a worker
 * whose events stop is told the same way wherever it is routed from.
 *
 * Contract: liveness only moves when the pool's dispatches are noted (`KvEventManager.noteDispatch`): an engine that
 * is sent nothing is silent and still live.
 */
import type { WorkerRole } from '../common/index.js';
import type { KvEventManager } from '../events/index.js';
import type { RouterContext } from './context.js';

/** A worker's KV events as logged: `silent` is `never` while requests wait for a first event. */
type EventState = 'live' | 'stale' | 'never' | 'silent';

/** One worker as the watch names it. */
export interface WatchedWorker {
  readonly id: number;
  readonly role: WorkerRole;
  /** How its lines name it (`worker 3`, `endpoint 10.0.0.1:8000`). */
  readonly name: string;
  /** What every line about it carries (its id and address). */
  readonly fields: Readonly<Record<string, unknown>>;
  /**
   * Its KV-event publisher, when it names one: what the silent line adds to its fields, and what it asks to check.
   * Undefined: it publishes none kvgate knows of (never events, and never said to be silent).
   */
  readonly publisher?: { readonly fields: Readonly<Record<string, unknown>>; readonly check: string } | undefined;
}

export class KvEventsWatch {
  readonly #model: string;
  readonly #ctx: RouterContext;
  /** Last KV-event state logged per worker (only workers that are watched now). */
  readonly #states = new Map<number, EventState>();

  constructor(model: string, ctx: RouterContext) {
    this.#model = model;
    this.#ctx = ctx;
  }

  /** Workers whose last state is kept (those ticked since they were last forgotten). */
  get size(): number {
    return this.#states.size;
  }

  /** The worker left (down, gone): its state is dropped (a worker that comes back starts from `never`). */
  forget(id: number): void {
    this.#states.delete(id);
  }

  /** Periodic: each worker's gauge, and its transition since the last tick logged and counted. */
  tick(workers: Iterable<WatchedWorker>, events: KvEventManager | undefined): void {
    if (events === undefined) return;
    const m = this.#ctx.metrics;
    for (const w of workers) {
      const status = events.eventStatus(w.id);
      const labels = { model: this.#model, worker_id: String(w.id), worker_type: w.role };
      m?.workerKvEventsLive.labels(labels).set(status === 'live' ? 1 : 0);
      const now: EventState =
        status === 'never' && w.publisher !== undefined && events.liveness.silentWhileServing(w.id) ? 'silent' : status;
      const was = this.#states.get(w.id) ?? 'never';
      this.#states.set(w.id, now);
      if (now === was || now === 'never') continue;
      m?.workerKvEventsTransitions.labels({ model: this.#model, worker_id: String(w.id), to: now }).inc();
      const at = { ...w.fields, kvEvents: now };
      if (now === 'stale')
        this.#ctx.logger.warn(
          at,
          `${w.name}: KV events stale (requests were sent, no event arrived): scored in approximate mode`,
        );
      else if (now === 'silent')
        this.#ctx.logger.warn(
          { ...at, ...w.publisher?.fields },
          `${w.name}: no KV event since it joined though requests were sent: scored in approximate mode ` +
            `(check ${w.publisher?.check}, and that its engine publishes KV events)`,
        );
      else this.#ctx.logger.info(at, `${w.name}: KV events ${was === 'stale' ? 'resumed' : 'live'}`);
    }
  }
}
