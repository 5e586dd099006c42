/**
 * Hot reconfiguration of `kvgate serve -c FILE` (SIGHUP, `POST /admin/reload`).
 * The file is read and validated as at start; a file that is invalid, or that
 * changes a field read only at start, is rejected whole with every problem
 * named (KVG_ERR_RELOAD_REJECTED) and the running configuration stays. A valid
 * one is applied for the requests that arrive from now on: API keys and limits
 * (the HTTP server), router knobs (each model's routers), workers (joins and
 * leaves through `FleetMembers`). Requests in flight keep the worker, knobs
 * and deadline they started with. Reloads run one at a time; each is logged
 * with what changed and counted in `kvgate_config_reloads_total`. A worker the
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
   */
  reload(trigger: ReloadTrigger): Promise<ReloadOutcome> {
    const run = this.#queue.then(() => this.#counted(trigger));
    this.#queue = run.catch(() => undefined);
    return run;
  }

  /**
   * A reload that fails otherwise than rejected (the file could not be taken for another reason, or applying it
   * threw) is logged and counted too (`failed`). What was applied before the failure stays; the running
   * configuration is still the previous one, so the next reload of the file applies it all again.
   */
  #counted(trigger: ReloadTrigger): ReloadOutcome {
    try {
      return this.#reload(trigger);
    } catch (err) {
      if (!isKvgateError(err, 'KVG_ERR_RELOAD_REJECTED')) {
        this.#t.metrics.configReloads.labels({ trigger, outcome: 'failed' }).inc();
        const why = err instanceof Error ? err.message : String(err);
        this.#t.logger.error(
          { trigger, err },
          `configuration reload failed: ${why}; what was applied before the failure stays, the next reload tries again`,
        );
      }
      throw err;
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
   * Server settings first and router knobs (neither can fail on a validated config), then every leaving
   * worker before any joining one (an id may move between models). Returns the workers that could not join.
   */
  #apply(prev: GatewayConfig, next: GatewayConfig): NotJoined[] {
    this.#t.server.reconfigure(next);
    const diffs = next.models.map((m, i) => {
      const before = prev.models[i]!;
      if (JSON.stringify(before.router) !== JSON.stringify(m.router)) this.#t.reconfigureRouter(m);
      return workerDiff(before.workers, m.workers);
    });
    for (const d of diffs) for (const w of d.removed) this.#t.members.leave(w.id);
    const notJoined: NotJoined[] = [];
    for (const d of diffs) {
      for (const w of d.added) {
        try {
          this.#t.members.join(w, 'static');
        } catch (err) {
          // Taken by a worker another source registered: the rest of the reload stands.
          const reason = (err as Error).message;
          notJoined.push({ workerId: w.id, model: w.model, reason });
          this.#t.logger.error({ workerId: w.id, url: w.url, err: reason }, `worker ${w.id} could not join: ${reason}`);
        }
      }
    }
    return notJoined;
  }
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
