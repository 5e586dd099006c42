/**
 * Hot reconfiguration of `kvgate serve -c FILE` (SIGHUP, `POST /admin/reload`).
 * The file is read and validated as at start; a file that is invalid, or that
 * changes a field read only at start, is rejected whole with every problem
 * named (KVG_ERR_RELOAD_REJECTED) and the running configuration stays. A valid
 * one is applied for the requests that arrive from now on, in stages: API keys
 * and limits (the HTTP server), router knobs (each model's routers), workers
 * (every leave, then every join, through `FleetMembers`). Requests in flight
 * keep the worker, knobs and deadline they started with. A reload is whole or
 * nothing up to the leaves: a stage that throws (the file was validated, so
 * only the running gateway can refuse it, e.g. a router whose knobs differ
 * from the file's) rolls back the stages before it, newest first, to the
 * running configuration, and the reload fails (KVG_ERR_RELOAD_FAILED naming
 * the stage). The leaves come once every such stage has been applied and are
 * where the reload commits: a leave cannot be undone (a worker put back joins
 * afresh: its prefix index, KV-event subscription, in-flight bookings, health
 * and session pins are gone), so a leave that throws rolls nothing back. A
 * worker whose leave threw and that is still registered is named, the rest
 * of the reload stands, the outcome is `partial`, and the running
 * configuration keeps the worker, so the next reload of the same file tries
 * to remove it again. Reloads run one at a time; each is logged with what
 * changed and counted in `kvgate_config_reloads_total`. A worker the file
 * adds that cannot join (its id held by a worker another discovery source
 * registered) is left out and named the same way (`partial`), and the
 * running configuration records the worker as not configured, so the next
 * reload of the same file tries it again.
 */
import type { Logger } from 'pino';
import {
  configChanges,
  configProblemsError,
  hiddenByFlags,
  reloadProblems,
  workerDiff,
  type ConfigChange,
  type ConfigProblem,
  type FlaggedField,
  type GatewayConfig,
  type HiddenByFlag,
  type ModelConfig,
  type WorkerConfig,
} from '../config/index.js';
import { KvgateError, isKvgateError } from '../errors/index.js';
import type { FleetMembers } from '../fleet/index.js';

/** What a reload changes. */
export interface ReloadTargets {
  /**
   * Reads and validates the file (with the command's flags) as at start; its errors end "the running configuration is
   * unchanged". Tells `onFlagged` the fields the flags set, with the file's values there (see `flaggedAtStart`).
   */
  readonly load: (onFlagged?: (fields: readonly FlaggedField[]) => void) => GatewayConfig;
  /** The fields the flags set at start, with the file's values then: a reload names those the file changes since. */
  readonly flaggedAtStart?: readonly FlaggedField[];
  readonly server: { reconfigure(config: GatewayConfig): void };
  readonly members: FleetMembers;
  /** The router knobs of one model, for the requests routed from now on. */
  readonly reconfigureRouter: (model: ModelConfig) => void;
  readonly logger: Logger;
  /** The gateway's metrics (`kvgate_config_reloads_total`). */
  readonly metrics: {
    readonly configReloads: {
      labels(l: { trigger: ReloadTrigger; outcome: 'applied' | 'partial' | 'unchanged' | 'rejected' | 'failed' }): {
        inc(): void;
      };
    };
  };
}

export type ReloadTrigger = 'sighup' | 'admin';

/** A worker the reloaded file adds that could not join. */
export interface NotJoined {
  readonly workerId: number;
  readonly model: string;
  readonly reason: string;
}

/** A worker the reloaded file removes whose leave threw while it is still registered (it stays, configured). */
export interface NotLeft {
  readonly workerId: number;
  readonly model: string;
  readonly reason: string;
}

/**
 * What a reload did: what changed (empty: nothing did), the workers that could not join or leave, and the fields the
 * file changed that a command-line flag sets (absent: none), which keep the flag's value.
 */
export interface ReloadOutcome {
  readonly changes: ConfigChange[];
  readonly notJoined: readonly NotJoined[];
  readonly notLeft: readonly NotLeft[];
  readonly hiddenByFlags?: readonly HiddenByFlag[];
}

export class ConfigReloader {
  #current: GatewayConfig;
  /** The fields the flags set at the last reload applied (or at start), with the file's values then. */
  #flagged: readonly FlaggedField[];
  readonly #t: ReloadTargets;
  #queue: Promise<unknown> = Promise.resolve();

  constructor(current: GatewayConfig, targets: ReloadTargets) {
    this.#current = current;
    this.#flagged = targets.flaggedAtStart ?? [];
    this.#t = targets;
  }

  get current(): GatewayConfig {
    return this.#current;
  }

  /**
   * Reloads; resolves to what changed (empty: nothing did) and the workers that could not join or leave. One at a time.
   * @throws KvgateError KVG_ERR_RELOAD_REJECTED listing every problem (`detail.problems`); nothing changed.
   * @throws KvgateError KVG_ERR_RELOAD_FAILED naming the stage that threw (`detail.stage`); what was applied before
   *   it is rolled back (`detail.rolledBack`), so the running configuration is the previous one.
   */
  reload(trigger: ReloadTrigger): Promise<ReloadOutcome> {
    const run = this.#queue.then(() => this.#counted(trigger));
    this.#queue = run.catch(() => undefined);
    return run;
  }

  /**
   * A reload that fails otherwise than rejected (the file could not be taken for another reason, or applying it
   * threw and was rolled back) is logged and counted too (`failed`), and answered as KVG_ERR_RELOAD_FAILED. The
   * running configuration is still the previous one, so the next reload diffs against it and applies the file again.
   */
  #counted(trigger: ReloadTrigger): ReloadOutcome {
    try {
      return this.#reload(trigger);
    } catch (err) {
      if (isKvgateError(err, 'KVG_ERR_RELOAD_REJECTED')) throw err;
      const failed = isKvgateError(err, 'KVG_ERR_RELOAD_FAILED') ? err : reloadFailed('load', err, true);
      this.#t.metrics.configReloads.labels({ trigger, outcome: 'failed' }).inc();
      this.#t.logger.error({ trigger, stage: failed.detail?.stage, err: failed.cause ?? failed }, failed.message);
      throw failed;
    }
  }

  #reload(trigger: ReloadTrigger): ReloadOutcome {
    const { logger, metrics } = this.#t;
    const prev = this.#current;
    let next: GatewayConfig;
    let flagged = this.#flagged;
    try {
      next = this.#t.load((f) => (flagged = f));
      const problems = reloadProblems(prev, next);
      if (problems.length > 0) throw configProblemsError(problems, 'the running configuration is unchanged');
    } catch (err) {
      if (!isKvgateError(err, 'KVG_ERR_INVALID_CONFIG')) throw err;
      const problems = (err.detail?.problems ?? []) as ConfigProblem[];
      metrics.configReloads.labels({ trigger, outcome: 'rejected' }).inc();
      logger.error({ trigger, problems }, `configuration reload rejected: ${err.message}`);
      throw new KvgateError('KVG_ERR_RELOAD_REJECTED', err.message, { problems });
    }
    const changes = configChanges(prev, next);
    const hidden = this.#hiddenByFlags(trigger, flagged);
    if (changes.length === 0) {
      metrics.configReloads.labels({ trigger, outcome: 'unchanged' }).inc();
      logger.info({ trigger, file: next.file }, 'configuration reloaded: nothing changed');
      this.#flagged = flagged;
      return { changes, notJoined: [], notLeft: [], ...hidden };
    }
    const { notJoined, notLeft } = this.#apply(prev, next);
    this.#current = withWorkers(withoutWorkers(next, notJoined), notLeft, prev);
    // The server's view (`/admin/config`, the served models) as the workers are, too.
    if (notJoined.length + notLeft.length > 0) this.#t.server.reconfigure(this.#current);
    const changed = changes.map((c) => c.path).join(', ');
    if (notJoined.length + notLeft.length === 0) {
      metrics.configReloads.labels({ trigger, outcome: 'applied' }).inc();
      logger.info({ trigger, file: next.file, changes }, `configuration reloaded: ${changed} changed`);
    } else {
      metrics.configReloads.labels({ trigger, outcome: 'partial' }).inc();
      const ids = (l: readonly { workerId: number }[], what: string): string[] =>
        l.length === 0 ? [] : [`worker(s) ${l.map((n) => n.workerId).join(', ')} could not ${what}`];
      logger.warn(
        { trigger, file: next.file, changes, notJoined, notLeft },
        `configuration reloaded in part: ${changed} changed, but ${[
          ...ids(notJoined, 'join'),
          ...ids(notLeft, 'leave'),
        ].join(' and ')} (the next reload tries again)`,
      );
    }
    this.#flagged = flagged;
    return { changes, notJoined, notLeft, ...hidden };
  }

  /**
   * The fields the file changed since the last applied reload that a flag sets: the flags go on top of the file at
   * every read, so such an edit cannot take effect; each is named on a warn line (and in the outcome), never passed
   * over as "nothing changed". A reload that then fails names them again the next time.
   */
  #hiddenByFlags(trigger: ReloadTrigger, flagged: readonly FlaggedField[]): { hiddenByFlags?: HiddenByFlag[] } {
    const hidden = hiddenByFlags(this.#flagged, flagged);
    if (hidden.length === 0) return {};
    this.#t.logger.warn(
      { trigger, hiddenByFlags: hidden },
      `configuration reload: the file changes ${hidden.map((h) => `${h.path} (set by ${h.flag})`).join(', ')}; ` +
        `a flag on the command line keeps its value, so the file's is not applied (restart without the flag to take it)`,
    );
    return { hiddenByFlags: hidden };
  }

  /**
   * The stages that can be undone, each with its undo: the server settings, each changed model's router knobs; a
   * throw rolls back what was applied, newest first. Then the commit: every leaving worker before any joining one
   * (an id may move between models). A leave that throws (a worker still registered is returned) and a join
   * refused (its id held by another source: that worker is left out, returned) leave the rest standing.
   * @throws KvgateError KVG_ERR_RELOAD_FAILED naming the stage (`detail.rolledBack`: whether the rollback held).
   */
  #apply(prev: GatewayConfig, next: GatewayConfig): { notJoined: NotJoined[]; notLeft: NotLeft[] } {
    const { server } = this.#t;
    const moves = diffs(prev, next);
    const applied = new Stages();
    try {
      applied.run(
        'server',
        () => server.reconfigure(next),
        () => server.reconfigure(prev),
      );
      next.models.forEach((m, i) => {
        const before = prev.models[i]!;
        if (JSON.stringify(before.router) === JSON.stringify(m.router)) return;
        const reconfigure = this.#t.reconfigureRouter;
        applied.run(
          `models[${i}].router`,
          () => reconfigure(m),
          () => reconfigure(before),
        );
      });
    } catch (err) {
      throw reloadFailed(applied.failedAt ?? 'apply', err, this.#rollBack(applied));
    }
    const notLeft = this.#leave(moves);
    return { notLeft, notJoined: this.#join(moves) };
  }

  /**
   * Every leaving worker. Not rolled back when one throws (a listener of the registry or of the membership): a
   * worker put back would join afresh, without what its router knew of it, so a rollback would cost the gateway
   * what the file never asked for. One still registered after its throw is returned (it stays configured).
   */
  #leave(diffs: readonly { removed: WorkerConfig[] }[]): NotLeft[] {
    const { members, logger } = this.#t;
    const notLeft: NotLeft[] = [];
    for (const w of diffs.flatMap((d) => d.removed)) {
      try {
        members.leave(w.id);
      } catch (err) {
        const reason = messageOf(err);
        const state = members.state(w.id);
        const stays = state !== undefined && state !== 'draining';
        if (stays) notLeft.push({ workerId: w.id, model: w.model, reason });
        logger.error(
          { workerId: w.id, url: w.url, state: state ?? 'gone', err: reason },
          `worker ${w.id} leaving threw: ${reason}` +
            (stays ? ' (it stays; the next reload tries again)' : ' (it left)'),
        );
      }
    }
    return notLeft;
  }

  /** Undoes the applied stages, newest first; false when one of them could not be undone (each is an error line). */
  #rollBack(applied: Stages): boolean {
    let ok = true;
    for (const { stage, undo } of applied.done.reverse()) {
      try {
        undo();
      } catch (err) {
        ok = false;
        this.#t.logger.error({ stage, err }, `configuration reload: rolling back ${stage} failed: ${messageOf(err)}`);
      }
    }
    return ok;
  }

  /** Every joining worker; those that cannot join (their id held by a worker another source registered) are left out. */
  #join(diffs: readonly { added: WorkerConfig[] }[]): NotJoined[] {
    const notJoined: NotJoined[] = [];
    for (const d of diffs) {
      for (const w of d.added) {
        try {
          this.#t.members.join(w, 'static');
        } catch (err) {
          // Taken by a worker another source registered: the rest of the reload stands.
          const reason = messageOf(err);
          notJoined.push({ workerId: w.id, model: w.model, reason });
          this.#t.logger.error({ workerId: w.id, url: w.url, err: reason }, `worker ${w.id} could not join: ${reason}`);
        }
      }
    }
    return notJoined;
  }
}

/** The stages a reload applied, in order, each with its undo; `failedAt` names the one that threw. */
class Stages {
  readonly done: { stage: string; undo: () => void }[] = [];
  failedAt: string | undefined;

  /** Applies one stage, atomic (it changes nothing when it throws): undone only once applied. */
  run(stage: string, apply: () => void, undo: () => void): void {
    this.failedAt = stage;
    apply();
    this.done.push({ stage, undo });
    this.failedAt = undefined;
  }
}

/** Each model's workers that leave and join. */
function diffs(prev: GatewayConfig, next: GatewayConfig): { removed: WorkerConfig[]; added: WorkerConfig[] }[] {
  return next.models.map((m, i) => workerDiff(prev.models[i]!.workers, m.workers));
}

const messageOf = (err: unknown): string => (err instanceof Error ? err.message : String(err));

/** KVG_ERR_RELOAD_FAILED for a throw at `stage`, saying whether the running configuration is whole. */
function reloadFailed(stage: string, err: unknown, rolledBack: boolean): KvgateError {
  const then = rolledBack
    ? stage === 'load'
      ? 'nothing was applied; the running configuration is unchanged'
      : 'what was applied is rolled back; the running configuration is unchanged'
    : 'rolling it back failed too: the gateway may run a mix of the two; reload again or restart kvgate';
  const where = stage === 'load' ? 'while reading the file' : `while applying ${stage}`;
  return new KvgateError(
    'KVG_ERR_RELOAD_FAILED',
    `configuration reload failed ${where}: ${messageOf(err)}; ${then}`,
    { stage, rolledBack },
    { cause: err },
  );
}

/** `config` with the workers of `prev` that did not leave (the same object when every one did), each in its model. */
function withWorkers(config: GatewayConfig, notLeft: readonly NotLeft[], prev: GatewayConfig): GatewayConfig {
  if (notLeft.length === 0) return config;
  const ids = new Set(notLeft.map((n) => n.workerId));
  const models = config.models.map((m, i) => {
    const stayed = prev.models[i]!.workers.filter((w) => ids.has(w.id));
    return stayed.length === 0 ? m : { ...m, workers: [...m.workers.filter((w) => !ids.has(w.id)), ...stayed] };
  });
  return { ...config, models };
}

/** `config` without the workers that did not join (the same object when every one did). */
function withoutWorkers(config: GatewayConfig, notJoined: readonly NotJoined[]): GatewayConfig {
  if (notJoined.length === 0) return config;
  const ids = new Set(notJoined.map((n) => n.workerId));
  const models = config.models.map((m) =>
    m.workers.some((w) => ids.has(w.id)) ? { ...m, workers: m.workers.filter((w) => !ids.has(w.id)) } : m,
  );
  return { ...config, models };
}
