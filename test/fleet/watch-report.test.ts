/**
 * `WatchReport`, the one reporter of the etcd, Kubernetes Service and InferencePool watches: its state, the
 * `kvgate_discovery_watch_*` series and its lines, driven by hand in the two ways its sources use it (a failure
 * that loses a live watch being a failed attempt, as in Kubernetes, or not, as in etcd).
 */
import pino from 'pino';
import { describe, expect, it } from 'vitest';
import { WatchReport, type WatchReportOptions } from '../../src/fleet/watch-report.js';
import { KvgateMetrics } from '../../src/metrics/index.js';

function reporter(opts: Partial<WatchReportOptions> = {}): {
  report: WatchReport;
  lines: Record<string, unknown>[];
  series: (name: string, labels?: string) => Promise<number>;
} {
  const metrics = new KvgateMetrics({ processMetrics: false });
  const lines: Record<string, unknown>[] = [];
  const report = new WatchReport({
    model: 'm',
    source: 'etcd',
    what: 'etcd watch of /p/m/',
    fields: { prefix: '/p/m/' },
    stays: 'the current workers stay',
    ...opts,
  });
  report.start(pino({ level: 'info' }, { write: (l: string) => void lines.push(JSON.parse(l)) }), metrics);
  const series = (name: string, labels = ''): Promise<number> =>
    metrics
      .text()
      .then((t) => Number(new RegExp(`^${name}\\{model="m"${labels}[^}]*\\} (\\d+)`, 'm').exec(t)?.[1] ?? NaN));
  return { report, lines, series };
}

describe('WatchReport', () => {
  it('etcd-style: a lost live watch is a transition, not a retry; retries are warn lines; resumed says what the source adds', async () => {
    const { report, lines, series } = reporter({ retryLevel: 'warn' });
    expect(report.state).toBe('starting');
    expect(await series('kvgate_discovery_watch_up', ',source="etcd"')).toBe(0);
    // Failing before it is first live: a retry, no transition.
    report.failed(new Error('refused'), 500, { fields: { attempt: 1 }, reason: 'cannot list /p/m/: refused' });
    expect(report.state).toBe('starting');
    expect(report.live(2)).toBe('starting');
    expect(await series('kvgate_discovery_watch_up', ',source="etcd"')).toBe(1);

    report.lost(new Error('stream closed'));
    expect(report.state).toBe('lost');
    expect(await series('kvgate_discovery_watch_up', ',source="etcd"')).toBe(0);
    report.failed(new Error('unavailable'), 1000, { fields: { attempt: 1 } });
    expect(report.live(2, { fields: { workers: [1, 2] }, detail: 'listed again, 2 workers' })).toBe('lost');

    expect(await series('kvgate_discovery_watch_up', ',source="etcd"')).toBe(1);
    expect(await series('kvgate_discovery_watch_retries_total', ',source="etcd"')).toBe(2);
    expect(await series('kvgate_discovery_watch_transitions_total', ',source="etcd",transition="lost"')).toBe(1);
    expect(await series('kvgate_discovery_watch_transitions_total', ',source="etcd",transition="resumed"')).toBe(1);
    expect(lines.map((l) => [l['level'], l['msg']])).toEqual([
      [40, 'cannot list /p/m/: refused; the current workers stay, retrying'],
      [40, 'etcd watch of /p/m/ lost; the current workers stay until it is back'],
      [40, 'etcd watch of /p/m/ failed: unavailable; the current workers stay, retrying'],
      [30, 'etcd watch of /p/m/ resumed: listed again, 2 workers'],
    ]);
    expect(lines[0]).toMatchObject({ prefix: '/p/m/', attempt: 1, retryInMs: 500 });
    expect(lines[1]).toMatchObject({ prefix: '/p/m/', err: 'stream closed' });
    expect(lines[3]).toMatchObject({ prefix: '/p/m/', attempts: 2, workers: [1, 2] });
    expect(typeof lines[3]!['awayMs']).toBe('number');
  });

  it('Kubernetes-style: a failure of the live watch is lost and a failed attempt, at error by default', async () => {
    const { report, lines, series } = reporter({
      source: 'kubernetes',
      what: 'kubernetes watch of service ns/s',
      fields: { service: 's' },
    });
    report.live(0);
    report.failed(new Error('answered 503'), 500);
    expect(report.state).toBe('lost');
    report.live(1);
    expect(await series('kvgate_discovery_watch_retries_total', ',source="kubernetes"')).toBe(1);
    expect(lines.map((l) => [l['level'], l['msg']])).toEqual([
      [40, 'kubernetes watch of service ns/s lost; the current workers stay until it is back'],
      [50, 'kubernetes watch of service ns/s failed: answered 503; the current workers stay, retrying'],
      [30, 'kubernetes watch of service ns/s resumed'],
    ]);
    expect(lines.every((l) => l['service'] === 's')).toBe(true);
  });
});
