/**
 * `KubeListWatch` against the API server's PROTOCOL DOUBLE (test/helpers/kube-api-double.ts; no Kubernetes API
 * server runs here): a watch whose connection goes silent (dropped by something in between, no reset) is failed
 * after its timeout and grace, reported, and resumed from the last version, so the changes it missed arrive.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { KubeClient, KubeListWatch } from '../../src/fleet/kube-watch.js';
import { KubeApiDouble, type Slice } from '../helpers/kube-api-double.js';
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
});
