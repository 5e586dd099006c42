/**
 * `POST /admin/reload` under `kvgate serve --processes N`. The request reaches one process, but the N processes
 * must run one configuration: that process asks the primary over the cluster's IPC channel, the primary asks every
 * live process to reload (each runs its own reload, logged and counted there as `trigger="admin"`, one at a time with
 * its SIGHUPs) and collects what each did, and the asking process answers with the combined outcome: success only
 * when every process applied the file. A process that does not answer within `PROCESS_RELOAD_TIMEOUT_MS` counts as
 * failed (it may still apply it later: the answer says so). The primary logs each cluster reload once, at error
 * level naming every process that failed and how (`outcome`); the asking process counts each such process once in
 * `kvgate_config_reload_process_failures_total` (the primary has no registry of its own: every series comes from a
 * process). SIGHUP needs none of this: the primary forwards the signal to each process.
 */
import type { Worker } from 'node:cluster';
import type { Logger } from 'pino';
import { KvgateError, isKvgateError } from '../errors/index.js';
import type { GatewayOptions } from '../frontend/index.js';
import type { ClusterMember } from './cluster.js';
import type { ConfigReloader, NotJoined, NotLeft, ReloadOutcome } from './reload.js';

/**
 * Why a process did not apply the file, as counted: it refused the file (`rejected`), its reload failed or it was still
 * starting (`failed`), it did not answer in time (`no_answer`), or it could not be asked (`not_asked`).
 */
export type ProcessFailure = 'rejected' | 'failed' | 'no_answer' | 'not_asked';

/**
 * What one process's reload came to: what it did, or why it did not apply the file (its error's code and message;
 * `reason` when the primary, not the process, saw the failure).
 */
type LocalResult =
  | { readonly outcome: ReloadOutcome }
  | {
      readonly error: {
        readonly code: string;
        readonly message: string;
        readonly reason?: Extract<ProcessFailure, 'no_answer' | 'not_asked'>;
      };
    };

/** One process's reload, by its index (1..N). */
export type ProcessReload = LocalResult & { readonly process: number };

/** The combined outcome of a cluster reload: every process applied the file (`partial`: some worker did not join or leave). */
export interface ClusterReloadOutcome {
  readonly changes: ReloadOutcome['changes'];
  readonly notJoined: readonly (NotJoined & { readonly process: number })[];
  readonly notLeft: readonly (NotLeft & { readonly process: number })[];
  readonly processes: readonly { readonly process: number; readonly status: 'reloaded' | 'partial' }[];
  /** The fields the file changed that a flag sets (every process reads the same file with the same flags). */
  readonly hiddenByFlags?: ReloadOutcome['hiddenByFlags'];
}

/**
 * The messages: a process asks the primary (`ask`), the primary asks every process (`run`), each answers (`done`),
 * and the primary answers the asking process with every result (`answer`). Ids are the asker's (`ask`, `answer`)
 * and the primary's (`run`, `done`).
 */
type ReloadMessage =
  | { readonly kvgateReload: 'ask'; readonly id: number }
  | { readonly kvgateReload: 'run'; readonly id: number }
  | { readonly kvgateReload: 'done'; readonly id: number; readonly result: LocalResult }
  | { readonly kvgateReload: 'answer'; readonly id: number; readonly results: readonly ProcessReload[] };

const isReloadMessage = <K extends ReloadMessage['kvgateReload']>(
  m: unknown,
  kind: K,
): m is Extract<ReloadMessage, { kvgateReload: K }> =>
  typeof m === 'object' &&
  m !== null &&
  (m as { kvgateReload?: unknown }).kvgateReload === kind &&
  typeof (m as { id?: unknown }).id === 'number';

/** How long the primary waits for each process's reload (a reload reads one file and updates in-memory state). */
export const PROCESS_RELOAD_TIMEOUT_MS = 10_000;
/** How long the asking process waits for the primary: past the primary's own bound, so the primary's answer wins. */
const ANSWER_TIMEOUT_MS = PROCESS_RELOAD_TIMEOUT_MS + 2_000;

const messageOf = (err: unknown): string => (err instanceof Error ? err.message : String(err));
const errorOf = (r: ProcessReload): string => ('error' in r ? r.error.message : '');
const failed = (message: string, reason: 'no_answer' | 'not_asked'): LocalResult => ({
  error: { code: 'KVG_ERR_RELOAD_FAILED', message, reason },
});

/** How a process that did not apply the file failed; undefined for one that applied it. */
function processFailure(r: ProcessReload): ProcessFailure | undefined {
  if (!('error' in r)) return undefined;
  return r.error.reason ?? (r.error.code === 'KVG_ERR_RELOAD_REJECTED' ? 'rejected' : 'failed');
}

/** `kvgate_config_reload_process_failures_total`, as the asking process counts it. */
export interface ProcessFailureCounter {
  labels(l: { trigger: 'admin'; outcome: ProcessFailure; failed_process: string }): { inc(): void };
}

/**
 * In the primary: serves the processes' reload requests. Returns the handler of the cluster's `message` event;
 * it returns false for a message that is not a reload's (the caller's other handlers take it).
 */
export function primaryReloads(
  logger: Logger,
  live: () => Iterable<Worker>,
  indexOf: ReadonlyMap<number, number>,
): (worker: Worker, message: unknown) => boolean {
  let next = 0;
  const runs = new Map<number, (worker: Worker, result: LocalResult) => void>();
  return (asker, message) => {
    if (isReloadMessage(message, 'done')) {
      runs.get(message.id)?.(asker, message.result);
      return true;
    }
    if (!isReloadMessage(message, 'ask')) return false;
    const id = next++;
    const waiting = new Map<number, Worker>([...live()].map((w) => [w.id, w]));
    const results: ProcessReload[] = [];
    const finish = (): void => {
      clearTimeout(timer);
      runs.delete(id);
      for (const w of waiting.values())
        results.push({
          process: indexOf.get(w.id) ?? 0,
          ...failed(`no answer within ${PROCESS_RELOAD_TIMEOUT_MS} ms (it may still apply the file)`, 'no_answer'),
        });
      waiting.clear();
      results.sort((a, b) => a.process - b.process);
      logClusterReload(logger, indexOf.get(asker.id), results);
      if (asker.isConnected()) asker.send({ kvgateReload: 'answer', id: message.id, results } satisfies ReloadMessage);
    };
    const settle = (w: Worker, result: LocalResult): void => {
      if (!waiting.delete(w.id)) return;
      results.push({ ...result, process: indexOf.get(w.id) ?? 0 });
      if (waiting.size === 0) finish();
    };
    runs.set(id, settle);
    const timer = setTimeout(finish, PROCESS_RELOAD_TIMEOUT_MS);
    for (const w of [...waiting.values()]) {
      w.send({ kvgateReload: 'run', id } satisfies ReloadMessage, undefined, (err: Error | null) => {
        if (err !== null) settle(w, failed(`could not be asked to reload: ${err.message}`, 'not_asked'));
      });
    }
    return true;
  };
}

/** The primary's line for a cluster reload: info when every process applied the file, else error naming each failure. */
function logClusterReload(logger: Logger, asker: number | undefined, results: readonly ProcessReload[]): void {
  const failures = results.filter((r) => 'error' in r);
  const processes = results.map((r) =>
    'error' in r ? { process: r.process, ...r.error, outcome: processFailure(r) } : { process: r.process, code: 'ok' },
  );
  if (failures.length === 0) {
    logger.info(
      { trigger: 'admin', asker, processes },
      `configuration reload (POST /admin/reload): applied by every process (${results.map((r) => r.process).join(', ')})`,
    );
    return;
  }
  logger.error(
    { trigger: 'admin', asker, processes },
    `configuration reload (POST /admin/reload): ${failureText(results)}`,
  );
}

/** Which processes did not apply the file and why, and what that leaves running. */
function failureText(results: readonly ProcessReload[]): string {
  const failures = results.filter((r) => 'error' in r);
  const applied = results.filter((r) => 'outcome' in r).map((r) => r.process);
  const why = failures.map((r) => `process ${r.process}: ${errorOf(r)}`).join('; ');
  const then =
    applied.length === 0
      ? 'no process applied it'
      : `process(es) ${applied.join(', ')} applied it, so the processes run different configurations until a reload ` +
        'succeeds in every one: fix the cause and reload again, or restart kvgate';
  return `failed in ${failures.length} of ${results.length} processes (${why}); ${then}`;
}

/**
 * The answer to `POST /admin/reload` from every process's result.
 * @throws KvgateError KVG_ERR_RELOAD_REJECTED when every process refused the file (nothing changed anywhere).
 * @throws KvgateError KVG_ERR_RELOAD_FAILED naming each process that did not apply it and why, otherwise.
 */
export function combinedReload(results: readonly ProcessReload[]): ClusterReloadOutcome {
  const errors = results.flatMap((r) => ('error' in r ? [r.error] : []));
  if (errors.length === 0) {
    const outcomes = results.flatMap((r) => ('outcome' in r ? [{ process: r.process, ...r.outcome }] : []));
    return {
      changes: outcomes[0]?.changes ?? [],
      notJoined: outcomes.flatMap((o) => o.notJoined.map((n) => ({ ...n, process: o.process }))),
      notLeft: outcomes.flatMap((o) => o.notLeft.map((n) => ({ ...n, process: o.process }))),
      processes: outcomes.map((o) => ({
        process: o.process,
        status: o.notJoined.length + o.notLeft.length === 0 ? 'reloaded' : 'partial',
      })),
      ...(outcomes[0]?.hiddenByFlags === undefined ? {} : { hiddenByFlags: outcomes[0].hiddenByFlags }),
    };
  }
  if (errors.length === results.length && errors.every((e) => e.code === 'KVG_ERR_RELOAD_REJECTED')) {
    // Every process read the same file: one message says it, unless they saw it differently.
    const same = errors.every((e) => e.message === errors[0]!.message);
    const why = same ? errors[0]!.message : results.map((r) => `process ${r.process}: ${errorOf(r)}`).join('; ');
    throw new KvgateError('KVG_ERR_RELOAD_REJECTED', `every process refused the file: ${why}`);
  }
  throw new KvgateError('KVG_ERR_RELOAD_FAILED', `configuration reload ${failureText(results)}`, {
    processes: results.map((r) => ({ process: r.process, ...('error' in r ? r.error : { code: 'ok' }) })),
  });
}

/**
 * The asking process's answer from every process's result: each process that did not apply the file is counted once
 * in `failures` (`failed_process`: its index; the primary logged it, naming it), then the results are combined.
 * @throws KvgateError as `combinedReload`.
 */
export function answeredReload(
  results: readonly ProcessReload[],
  failures: ProcessFailureCounter | undefined,
): ClusterReloadOutcome {
  for (const r of results) {
    const outcome = processFailure(r);
    if (outcome !== undefined) failures?.labels({ trigger: 'admin', outcome, failed_process: String(r.process) }).inc();
  }
  return combinedReload(results);
}

/** The primary did not answer the asking process: why, and how it is counted (`failed_process="primary"`). */
interface NoAnswer {
  readonly message: string;
  readonly reason: 'no_answer' | 'not_asked';
}

/**
 * In a cluster process: runs this process's part of every cluster reload (`local`: its own reload, trigger `admin`),
 * and returns what `POST /admin/reload` calls: a reload of every process, resolved to the combined outcome.
 * `failures` is the gateway's counter once it serves.
 * @throws KvgateError as `combinedReload`; KVG_ERR_RELOAD_FAILED too when the primary does not answer in time.
 */
function clusterReload(
  logger: Logger,
  failures: () => ProcessFailureCounter | undefined,
  local: () => Promise<ReloadOutcome>,
): () => Promise<ClusterReloadOutcome> {
  const pending = new Map<number, (results: readonly ProcessReload[] | NoAnswer) => void>();
  process.on('message', (m: unknown) => {
    if (isReloadMessage(m, 'answer')) pending.get(m.id)?.(m.results);
    if (!isReloadMessage(m, 'run')) return;
    void Promise.resolve()
      .then(local)
      .then(
        (outcome): LocalResult => ({ outcome }),
        (err: unknown): LocalResult => ({
          error: { code: isKvgateError(err) ? err.code : 'KVG_ERR_RELOAD_FAILED', message: messageOf(err) },
        }),
      )
      .then((result) => {
        if (process.connected) process.send?.({ kvgateReload: 'done', id: m.id, result } satisfies ReloadMessage);
      });
  });
  let next = 0;
  return () =>
    new Promise<ClusterReloadOutcome>((resolve, reject) => {
      const id = next++;
      const settle = (r: readonly ProcessReload[] | NoAnswer): void => {
        clearTimeout(timer);
        pending.delete(id);
        if (!('reason' in r)) {
          try {
            resolve(answeredReload(r, failures()));
          } catch (err) {
            reject(err);
          }
          return;
        }
        failures()?.labels({ trigger: 'admin', outcome: r.reason, failed_process: 'primary' }).inc();
        logger.error(
          { trigger: 'admin', outcome: r.reason, err: r.message },
          `configuration reload (POST /admin/reload): ${r.message}`,
        );
        reject(new KvgateError('KVG_ERR_RELOAD_FAILED', `configuration reload: ${r.message}`));
      };
      const timer = setTimeout(
        () =>
          settle({
            message: `the other processes' outcomes did not come within ${ANSWER_TIMEOUT_MS} ms; reload again`,
            reason: 'no_answer',
          }),
        ANSWER_TIMEOUT_MS,
      );
      pending.set(id, settle);
      process.send?.({ kvgateReload: 'ask', id } satisfies ReloadMessage, undefined, undefined, (err: Error | null) => {
        if (err !== null)
          settle({
            message: `the other processes could not be asked (${err.message}); nothing was reloaded`,
            reason: 'not_asked',
          });
      });
    });
}

/**
 * What `POST /admin/reload` runs: this process's reload, or in a cluster every process's (as above), since
 * the processes must not route with different configurations. `running()`'s reloader and metrics are undefined until
 * the gateway serves: a cluster reload asked of this process before then fails here, and the combined answer names
 * this process.
 */
export function adminReload(
  member: ClusterMember | undefined,
  running: () => {
    readonly reloader: ConfigReloader | undefined;
    readonly metrics: { readonly configReloadProcessFailures: ProcessFailureCounter } | undefined;
  },
  logger: Logger,
): NonNullable<GatewayOptions['reload']> {
  if (member === undefined) return () => running().reloader!.reload('admin');
  return clusterReload(
    logger,
    () => running().metrics?.configReloadProcessFailures,
    () => {
      const r = running().reloader;
      if (r !== undefined) return r.reload('admin');
      return Promise.reject(
        new KvgateError(
          'KVG_ERR_RELOAD_FAILED',
          'this process is still starting; its running configuration is unchanged',
        ),
      );
    },
  );
}
