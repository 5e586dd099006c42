/**
 * The cluster reload's two halves without processes: the primary asking every process and bounding each answer
 * (timers faked), and the combined answer from each process's result.
 */
import type { Worker } from 'node:cluster';
import { pino } from 'pino';
import { afterEach, describe, expect, it, vi } from 'vitest';
import {
  answeredReload,
  combinedReload,
  PROCESS_RELOAD_TIMEOUT_MS,
  primaryReloads,
  type ProcessFailureCounter,
  type ProcessReload,
} from '../../src/cli/cluster-reload.js';
import { isKvgateError } from '../../src/errors/index.js';

const CHANGES = [{ path: 'models[0].router.router_temperature', from: 0, to: 0.5 }];
const applied = (process: number): ProcessReload => ({
  process,
  outcome: { changes: CHANGES, notJoined: [], notLeft: [] },
});
const refused = (
  process: number,
  message = 'models[0].router.router_temperature: must be a number >= 0',
): ProcessReload => ({
  process,
  error: { code: 'KVG_ERR_RELOAD_REJECTED', message },
});

function thrown(f: () => unknown): { code: string; message: string } {
  try {
    f();
  } catch (err) {
    if (isKvgateError(err)) return { code: err.code, message: err.message };
    throw err;
  }
  throw new Error('did not throw');
}

describe('combinedReload', () => {
  it('succeeds when every process applied the file, each listed', () => {
    expect(combinedReload([applied(1), applied(2)])).toEqual({
      changes: CHANGES,
      notJoined: [],
      notLeft: [],
      processes: [
        { process: 1, status: 'reloaded' },
        { process: 2, status: 'reloaded' },
      ],
    });
  });

  it('is partial when a worker did not join in some process, naming the process', () => {
    const partial: ProcessReload = {
      process: 2,
      outcome: { changes: [], notJoined: [{ workerId: 7, model: 'm', reason: 'held by etcd' }], notLeft: [] },
    };
    const r = combinedReload([applied(1), partial]);
    expect(r.processes).toEqual([
      { process: 1, status: 'reloaded' },
      { process: 2, status: 'partial' },
    ]);
    expect(r.notJoined).toEqual([{ workerId: 7, model: 'm', reason: 'held by etcd', process: 2 }]);
  });

  it('is partial when a worker did not leave in some process, naming the process', () => {
    const partial: ProcessReload = {
      process: 1,
      outcome: { changes: [], notJoined: [], notLeft: [{ workerId: 4, model: 'm', reason: 'a listener refused' }] },
    };
    const r = combinedReload([partial, applied(2)]);
    expect(r.processes).toEqual([
      { process: 1, status: 'partial' },
      { process: 2, status: 'reloaded' },
    ]);
    expect(r.notLeft).toEqual([{ workerId: 4, model: 'm', reason: 'a listener refused', process: 1 }]);
  });

  it('is KVG_ERR_RELOAD_REJECTED when every process refused the file', () => {
    const e = thrown(() => combinedReload([refused(1), refused(2)]));
    expect(e).toEqual({
      code: 'KVG_ERR_RELOAD_REJECTED',
      message: 'every process refused the file: models[0].router.router_temperature: must be a number >= 0',
    });
  });

  it('is KVG_ERR_RELOAD_FAILED naming each process that did not apply it when another did', () => {
    const e = thrown(() =>
      combinedReload([
        applied(1),
        { process: 2, error: { code: 'KVG_ERR_RELOAD_FAILED', message: 'no answer within 10000 ms' } },
        refused(3, 'changed on disk'),
      ]),
    );
    expect(e.code).toBe('KVG_ERR_RELOAD_FAILED');
    expect(e.message).toBe(
      'configuration reload failed in 2 of 3 processes (process 2: no answer within 10000 ms; process 3: changed on ' +
        'disk); process(es) 1 applied it, so the processes run different configurations until a reload succeeds in ' +
        'every one: fix the cause and reload again, or restart kvgate',
    );
  });
});

/** A cluster worker as the primary sees it: what it was sent is kept. */
function fakeWorker(id: number): Worker & { sent: unknown[] } {
  const sent: unknown[] = [];
  return {
    id,
    sent,
    isConnected: () => true,
    send: (m: unknown, _h: unknown, cb?: (err: Error | null) => void) => {
      sent.push(m);
      cb?.(null);
      return true;
    },
  } as unknown as Worker & { sent: unknown[] };
}

describe('primaryReloads', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it('asks every process, and answers the asker once each answered or its time ran out', () => {
    vi.useFakeTimers();
    const [w1, w2] = [fakeWorker(11), fakeWorker(12)];
    const handle = primaryReloads(
      pino({ level: 'silent' }),
      () => [w1, w2],
      new Map([
        [11, 1],
        [12, 2],
      ]),
    );
    expect(handle(w1, { kvgateMetrics: 'request', id: 0 })).toBe(false);
    expect(handle(w1, { kvgateReload: 'ask', id: 5 })).toBe(true);
    expect(w1.sent).toEqual([{ kvgateReload: 'run', id: 0 }]);
    expect(w2.sent).toEqual([{ kvgateReload: 'run', id: 0 }]);
    handle(w1, { kvgateReload: 'done', id: 0, result: applied(1) });
    vi.advanceTimersByTime(PROCESS_RELOAD_TIMEOUT_MS - 1);
    expect(w1.sent).toHaveLength(1);
    vi.advanceTimersByTime(1);
    expect(w1.sent[1]).toEqual({
      kvgateReload: 'answer',
      id: 5,
      results: [
        { ...applied(1) },
        {
          process: 2,
          error: {
            code: 'KVG_ERR_RELOAD_FAILED',
            message: `no answer within ${PROCESS_RELOAD_TIMEOUT_MS} ms (it may still apply the file)`,
            reason: 'no_answer',
          },
        },
      ],
    });
    // A late answer changes nothing.
    handle(w2, { kvgateReload: 'done', id: 0, result: applied(2) });
    expect(w1.sent).toHaveLength(2);
  });
});

/** The counts a `ProcessFailureCounter` took, as `outcome/failed_process` keys. */
function countingFailures(): ProcessFailureCounter & { counts: Map<string, number> } {
  const counts = new Map<string, number>();
  return {
    counts,
    labels: (l) => ({
      inc: () => {
        const key = `${l.trigger}/${l.outcome}/${l.failed_process}`;
        counts.set(key, (counts.get(key) ?? 0) + 1);
      },
    }),
  };
}

describe('a cluster reload that some process did not apply is counted once per process, by how it failed', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it('a process that does not answer in time is counted no_answer, with the process named (and logged so)', () => {
    vi.useFakeTimers();
    const [w1, w2, w3] = [fakeWorker(11), fakeWorker(12), fakeWorker(13)];
    const lines: { msg: string; processes?: { process: number; outcome?: string }[] }[] = [];
    const logger = pino({ level: 'info' }, { write: (l: string) => void lines.push(JSON.parse(l) as never) });
    const handle = primaryReloads(
      logger,
      () => [w1, w2, w3],
      new Map([
        [11, 1],
        [12, 2],
        [13, 3],
      ]),
    );
    handle(w1, { kvgateReload: 'ask', id: 0 });
    handle(w1, { kvgateReload: 'done', id: 0, result: applied(1) });
    handle(w3, { kvgateReload: 'done', id: 0, result: refused(3, 'changed on disk') });
    vi.advanceTimersByTime(PROCESS_RELOAD_TIMEOUT_MS);
    const answer = w1.sent[1] as { results: ProcessReload[] };
    const failures = countingFailures();
    expect(() => answeredReload(answer.results, failures)).toThrow(/failed in 2 of 3 processes/);
    expect(Object.fromEntries(failures.counts)).toEqual({ 'admin/no_answer/2': 1, 'admin/rejected/3': 1 });
    // The primary's one line for the reload names each process that failed and how.
    expect(lines).toHaveLength(1);
    expect(lines[0]!.processes?.map((p) => [p.process, p.outcome])).toEqual([
      [1, undefined],
      [2, 'no_answer'],
      [3, 'rejected'],
    ]);
  });

  it('a process that could not be asked is counted not_asked; one whose reload failed, failed; none when all applied', () => {
    const failures = countingFailures();
    const unreachable: ProcessReload = {
      process: 1,
      error: { code: 'KVG_ERR_RELOAD_FAILED', message: 'could not be asked to reload: EPIPE', reason: 'not_asked' },
    };
    const starting: ProcessReload = {
      process: 2,
      error: { code: 'KVG_ERR_RELOAD_FAILED', message: 'this process is still starting' },
    };
    expect(() => answeredReload([unreachable, starting, applied(3)], failures)).toThrow(/failed in 2 of 3/);
    expect(answeredReload([applied(1), applied(2)], failures).processes).toHaveLength(2);
    expect(Object.fromEntries(failures.counts)).toEqual({ 'admin/not_asked/1': 1, 'admin/failed/2': 1 });
  });
});
