/**
 * `KubeListWatch` against the API server's PROTOCOL DOUBLE (test/helpers/kube-api-double.ts; no Kubernetes API
 * server runs here): a watch whose connection goes silent (dropped by something in between, no reset) is failed
 * after its timeout and grace, reported, and resumed from the last version, so the changes it missed arrive; a
 * server that ends every watch at once is retried on the back-off, in virtual time, not in a tight loop.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/common/index.js';
import { KubeClient, KubeListWatch } from '../../src/fleet/kube-watch.js';
import { KubeApiDouble, type Slice } from '../helpers/kube-api-double.js';
import { StepTimers } from '../helpers/step-timers.js';
import { until } from '../helpers/until.js';

function slice(name: string, address: string): Slice {
  return {
    metadata: { name, labels: { 'kubernetes.io/service-name': 'engines' } },
    ports: [{ name: 'http', port: 8000 }],
    endpoints: [{ addresses: [address], conditions: { ready: true } }],
  };
}

describe('KubeListWatch', () => {
  let api: KubeApiDouble | undefined;
  let client: KubeClient | undefined;
  let watch: KubeListWatch<Slice> | undefined;
  afterEach(async () => {
    watch?.close();
    await client?.close();
    await api?.close();
  });

  it('a watch whose connection goes silent is failed after its timeout and resumed from the last version', async () => {
    api = await KubeApiDouble.start();
    api.put(slice('a', '10.0.0.1'));
    client = new KubeClient({ apiServer: api.url, tokenFile: '/nonexistent', caFile: '/nonexistent' });
    let names: string[] = [];
    const failures: string[] = [];
    watch = new KubeListWatch<Slice>({
      client,
      path: () =>
        `/apis/discovery.k8s.io/v1/namespaces/ns/endpointslices?labelSelector=${encodeURIComponent('kubernetes.io/service-name=engines')}`,
      onChange: (slices) => (names = slices.map((s) => s.metadata.name).sort()),
      onFailure: (err) => failures.push(err.message),
      watchTimeoutS: 1,
      watchGraceMs: 100,
    });
    watch.start();
    await until(() => names.join() === 'a' && api!.requests.some((r) => r.startsWith('watch')), 'watching');
    api.stallWatches();
    api.put(slice('b', '10.0.0.2'));
    await until(() => names.join() === 'a,b', 'the missed change, replayed by a new watch', 10_000);
    // One failed attempt (the stalled watch), and no relist: the new watch resumed from the version it had.
    expect(failures).toEqual([expect.stringMatching(/timeout/i)]);
    expect(api.requests.filter((r) => r === 'list')).toHaveLength(1);
  });

  it('a server that ends each watch at once with no event is retried on the back-off, reset by an event', async () => {
    api = await KubeApiDouble.start();
    api.put(slice('a', '10.0.0.1'));
    api.endWatchesAtOnce = true;
    client = new KubeClient({ apiServer: api.url, tokenFile: '/nonexistent', caFile: '/nonexistent' });
    const scheduler = new StepTimers();
    const failures: [string, number][] = [];
    let names: string[] = [];
    watch = new KubeListWatch<Slice>({
      client,
      path: () =>
        `/apis/discovery.k8s.io/v1/namespaces/ns/endpointslices?labelSelector=${encodeURIComponent('kubernetes.io/service-name=engines')}`,
      onChange: (slices) => (names = slices.map((s) => s.metadata.name).sort()),
      onFailure: (err, retryInMs) => failures.push([err.message, retryInMs]),
      // The clock never moves: every watch has been open 0 ms. rng 1: each delay is the back-off's full step.
      clock: new ManualClock(),
      scheduler,
      rng: () => 1,
    });
    const watches = (): number => api!.requests.filter((r) => r.startsWith('watch')).length;
    watch.start();
    // Each ended watch is one failure and one timer; nothing reopens it until the timer fires.
    const delays: number[] = [];
    for (let n = 1; n <= 6; n++) {
      await until(() => failures.length === n && scheduler.pending.length === 1, `short watch ${n} reported`);
      expect(watches()).toBe(n);
      delays.push(n < 6 ? scheduler.fire() : scheduler.pending[0]!.ms);
    }
    expect(delays).toEqual([500, 1000, 2000, 4000, 8000, 10000]);
    expect(failures.map(([, ms]) => ms)).toEqual(delays);
    expect(failures[0]![0]).toMatch(/ended the watch after 0 ms with no event/);
    expect(api.requests.filter((r) => r === 'list')).toHaveLength(1);
    expect(names).toEqual(['a']);
    // A watch that delivers an event (then ends at once) resets the back-off: the next empty one waits the minimum.
    api.put(slice('b', '10.0.0.2'));
    scheduler.fire();
    await until(() => failures.length === 7 && scheduler.pending.length === 1, 'the watch after the event reported');
    expect(names).toEqual(['a', 'b']);
    expect(scheduler.pending[0]!.ms).toBe(500);
  });

  it('relist lists again with the new path at once, the watch in flight dropped and never reported nor applied', async () => {
    api = await KubeApiDouble.start();
    const labelled = (name: string, service: string): Slice => ({
      ...slice(name, '10.0.0.1'),
      metadata: { name, labels: { 'kubernetes.io/service-name': service } },
    });
    api.put(labelled('a', 'engines'));
    api.put(labelled('x', 'others'));
    client = new KubeClient({ apiServer: api.url, tokenFile: '/nonexistent', caFile: '/nonexistent' });
    let service = 'engines';
    let names: string[] = [];
    const failures: string[] = [];
    let lists = 0;
    watch = new KubeListWatch<Slice>({
      client,
      path: () =>
        `/apis/discovery.k8s.io/v1/namespaces/ns/endpointslices?labelSelector=${encodeURIComponent(`kubernetes.io/service-name=${service}`)}`,
      beforeList: () => Promise.resolve(void lists++),
      onChange: (slices) => (names = slices.map((s) => s.metadata.name).sort()),
      onFailure: (err) => failures.push(err.message),
    });
    watch.start();
    await until(() => names.join() === 'a' && api!.requests.some((r) => r.startsWith('watch')), 'watching');
    service = 'others';
    watch.relist();
    await until(() => names.join() === 'x', 'listed with the new selector');
    // The old selector's watch is gone: a change of its slices reaches nobody; the new one's are followed.
    api.put(labelled('b', 'engines'));
    api.put(labelled('y', 'others'));
    await until(() => names.join() === 'x,y', "the new selector's change");
    expect(failures).toEqual([]);
    expect(lists).toBe(2);
  });
});
