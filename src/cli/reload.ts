/**
 * Hot reconfiguration of `kvgate serve -c FILE` (SIGHUP, `POST /admin/reload`).
 * The file is read and validated as at start; a file that is invalid, or that
 * changes a field read only at start, is rejected whole with every problem
 * named (KVG_ERR_RELOAD_REJECTED) and the running configuration stays. A valid
 * one is applied for the requests that arrive from now on, in stages: API keys
 * and limits (the HTTP server), router knobs (each model's routers), workers
 * (every leave, then every join, through `FleetMembers`). Requests in flight
 * keep the worker, knobs and deadline they started with. A reload is whole or
 * nothing: a stage that throws (the file was validated, so only the running
 * gateway can refuse it, e.g. a router whose knobs differ from the file's)
 * rolls back the stages before it, newest first, to the running
 * configuration, and the reload fails (KVG_ERR_RELOAD_FAILED naming the
 * stage). Reloads run one at a time; each is logged with what changed and
 * counted in `kvgate_config_reloads_total`. A worker the
 * file adds that cannot join (its id held by a worker another discovery
 * source registered) is left out and named: the rest of the reload stands,
 * the outcome is `partial`, and the running configuration records the worker
 * as not configured, so the next reload of the same file tries it again.
 */
import type { Logger } from 'pino';
import {
  configChanges,
  configProblemsError,
  reloadProblems,
  workerDiff,
  type ConfigChange,
  type ConfigProblem,
  type GatewayConfig,
  type ModelConfig,
  type WorkerConfig,
} from '../config/index.js';
import { KvgateError, isKvgateError } from '../errors/index.js';
import type { FleetMembers } from '../fleet/index.js';

/** What a reload changes. */
export interface ReloadTargets {
  /** Reads and validates the file (with the command's flags) as at start; its errors end "the running configuration is unchanged". */
  readonly load: () => GatewayConfig;
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

/** What a reload did: what changed (empty: nothing did), and the workers it adds that could not join. */
export interface ReloadOutcome {
  readonly changes: ConfigChange[];
  readonly notJoined: readonly NotJoined[];
}

export class ConfigReloader {
  #current: GatewayConfig;
  readonly #t: ReloadTargets;
  #queue: Promise<unknown> = Promise.resolve();

  constructor(current: GatewayConfig, targets: ReloadTargets) {
    this.#current = current;
    this.#t = targets;
  }

  get current(): GatewayConfig {
    return this.#current;
  }

  /**
   * Reloads; resolves to what changed (empty: nothing did) and the workers that could not join. One reload at a time.
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
    try {
      next = this.#t.load();
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
    if (changes.length === 0) {
      metrics.configReloads.labels({ trigger, outcome: 'unchanged' }).inc();
      logger.info({ trigger, file: next.file }, 'configuration reloaded: nothing changed');
      return { changes, notJoined: [] };
    }
    const notJoined = this.#apply(prev, next);
    this.#current = withoutWorkers(next, notJoined);
    // The server's view (`/admin/config`, the served models) without them too.
    if (notJoined.length > 0) this.#t.server.reconfigure(this.#current);
    const changed = changes.map((c) => c.path).join(', ');
    if (notJoined.length === 0) {
      metrics.configReloads.labels({ trigger, outcome: 'applied' }).inc();
      logger.info({ trigger, file: next.file, changes }, `configuration reloaded: ${changed} changed`);
    } else {
      metrics.configReloads.labels({ trigger, outcome: 'partial' }).inc();
      const ids = notJoined.map((n) => n.workerId).join(', ');
      logger.warn(
        { trigger, file: next.file, changes, notJoined },
        `configuration reloaded in part: ${changed} changed, but worker(s) ${ids} could not join (the next reload tries again)`,
      );
    }
    return { changes, notJoined };
  }

  /**
   * The stages, each with its undo: the server settings, each changed model's router knobs, then every leaving
   * worker before any joining one (an id may move between models). A join refused (its id held by another source)
   * leaves that worker out (returned); any other throw rolls back what was applied, newest first.
   * @throws KvgateError KVG_ERR_RELOAD_FAILED naming the stage (`detail.rolledBack`: whether the rollback held).
   */
  #apply(prev: GatewayConfig, next: GatewayConfig): NotJoined[] {
    const { server, members } = this.#t;
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
      moves.forEach((d, i) => {
        for (const w of d.removed)
          applied.run(
            `models[${i}].workers`,
            () => members.leave(w.id),
            () => rejoin(members, w),
            false,
          );
      });
    } catch (err) {
      throw reloadFailed(applied.failedAt ?? 'apply', err, this.#rollBack(applied));
    }
    return this.#join(moves);
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

  /**
   * Applies one stage. An atomic one (the server's settings, a router's knobs: each changes nothing when it throws)
   * is undone only once applied; another (a leave) is undone even when it throws, its undo checking what changed.
   */
  run(stage: string, apply: () => void, undo: () => void, atomic = true): void {
    this.failedAt = stage;
    if (!atomic) this.done.push({ stage, undo });
    apply();
    if (atomic) this.done.push({ stage, undo });
    this.failedAt = undefined;
  }
}

/** Each model's workers that leave and join. */
function diffs(prev: GatewayConfig, next: GatewayConfig): { removed: WorkerConfig[]; added: WorkerConfig[] }[] {
  return next.models.map((m, i) => workerDiff(prev.models[i]!.workers, m.workers));
}

/** Undoes a leave: the worker joins again unless it is still registered (its leave threw before removing it). */
function rejoin(members: FleetMembers, w: WorkerConfig): void {
  const state = members.state(w.id);
  if (state === undefined || state === 'draining') members.join(w, 'static');
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

/** `config` without the workers that did not join (the same object when every one did). */
function withoutWorkers(config: GatewayConfig, notJoined: readonly NotJoined[]): GatewayConfig {
  if (notJoined.length === 0) return config;
  const ids = new Set(notJoined.map((n) => n.workerId));
  const models = config.models.map((m) =>
    m.workers.some((w) => ids.has(w.id)) ? { ...m, workers: m.workers.filter((w) => !ids.has(w.id)) } : m,
  );
  return { ...config, models };
}
