/**
 * Where each model's discovery reports go, and the reports made before that is known.
 *
 * The health prober and the ejection ledger are one per gateway, but each model's lines and counts go to that
 * model's logger and metrics, registered by `watch` as the gateway builds the model's router. The gateway builds
 * its models one after the other and probing starts with the first (src/fleet), so a later model's workers can
 * be ejected, kept, readmitted or put in panic before their model is watched. Those reports are held here, in
 * order, and run when the model's sink is set, their log lines carrying `early: true`: every transition is
 * logged and counted whatever order the models were built in.
 *
 * Bounded: at most `HELD_PER_MODEL` reports are held per model (a model nobody watches, as a library user's may
 * be, holds no more); past that the oldest go, and the replay says how many in a warn line.
 */
import type { Logger } from '../common/index.js';

/** Reports held at most per model before its sink is set. */
export const HELD_PER_MODEL = 64;

/** What every sink carries: the model's logger (bound to the model). */
export interface LoggingSink {
  readonly logger: Logger;
}

export class ModelSinks<S extends LoggingSink> {
  readonly #sinks = new Map<string, S>();
  readonly #held = new Map<string, { reports: ((sink: S) => void)[]; dropped: number }>();

  /** The model's sink (undefined before it is set). */
  get(model: string): S | undefined {
    return this.#sinks.get(model);
  }

  /** Sets (or replaces) the model's sink, then runs the reports held for it, oldest first. */
  set(model: string, sink: S): void {
    this.#sinks.set(model, sink);
    const held = this.#held.get(model);
    if (held === undefined) return;
    this.#held.delete(model);
    // Replayed lines are written now: `early` says they tell of something before the model was watched.
    const early: S = { ...sink, logger: sink.logger.child({ early: true }) };
    if (held.dropped > 0)
      early.logger.warn(
        { dropped: held.dropped },
        `${held.dropped} health report(s) of the model's workers from before its router was built were dropped ` +
          `(more than ${HELD_PER_MODEL}); the ${held.reports.length} latest follow`,
      );
    for (const report of held.reports) report(early);
  }

  /** Runs `report` with the model's sink now, or holds it until the sink is set. */
  report(model: string, report: (sink: S) => void): void {
    const sink = this.#sinks.get(model);
    if (sink !== undefined) {
      report(sink);
      return;
    }
    let held = this.#held.get(model);
    if (held === undefined) this.#held.set(model, (held = { reports: [], dropped: 0 }));
    held.reports.push(report);
    if (held.reports.length > HELD_PER_MODEL) {
      held.reports.shift();
      held.dropped++;
    }
  }
}
