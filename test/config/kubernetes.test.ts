/** The `kubernetes` discovery section and the worker an EndpointSlice endpoint becomes (issue 16, Kubernetes source). */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { kubernetesWorker, loadGatewayConfig } from '../../src/config/index.js';
import { kvgateErrorOf } from '../helpers/kvgate-error.js';

const dir = mkdtempSync(join(tmpdir(), 'kvgate-k8s-config-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function load(modelYaml: string): ReturnType<typeof loadGatewayConfig> {
  const file = join(dir, 'kvgate.yaml');
  writeFileSync(file, `models:\n  - name: m\n${modelYaml}`);
  return loadGatewayConfig({ file, env: {} });
}

const problemsOf = (f: () => unknown): string[] =>
  (kvgateErrorOf(f).detail!.problems as { path: string; reason: string }[]).map((p) => `${p.path}: ${p.reason}`);

describe('kubernetes discovery config', () => {
  it('takes in-cluster defaults; a model with kubernetes may list no static worker', () => {
    expect(load('    kubernetes: { service: vllm }\n').models[0]!.kubernetes).toEqual({
      apiServer: 'https://kubernetes.default.svc',
      namespace: 'default',
      service: 'vllm',
      portName: undefined,
      tokenFile: '/var/run/secrets/kubernetes.io/serviceaccount/token',
      caFile: '/var/run/secrets/kubernetes.io/serviceaccount/ca.crt',
      idBase: 100_000,
    });
  });

  it('names the field of a bad value', () => {
    expect(problemsOf(() => load('    kubernetes: { service: Bad_Name, api_server: "ftp://x" }\n')).join('\n')).toMatch(
      /models\[0\]\.kubernetes\.api_server: must be an http\(s\):\/\/host:port URL[\s\S]*models\[0\]\.kubernetes\.service: must be a Kubernetes name/,
    );
  });

  // issue 30: workers get taints from Kubernetes labels (one label per taint) and an annotation (a list).
  it('reads taints from taint.kvgate.io/<taint> labels and the kvgate.io/taints annotation', () => {
    const model = load('    kubernetes: { service: s }\n    router: { use_kv_events: false }\n').models[0]!;
    const w = kubernetesWorker(
      model,
      7,
      {
        address: '10.1.2.3',
        port: 8000,
        labels: { 'taint.kvgate.io/h100': 'true', 'taint.kvgate.io/spot': 'false', app: 'vllm' },
        annotations: { 'kvgate.io/taints': 'fp8, zone-a' },
      },
      'slice',
    );
    expect(w.taints).toEqual(['h100', 'fp8', 'zone-a']);
    const plain = kubernetesWorker(model, 8, { address: '10.1.2.4', port: 8000, labels: {}, annotations: {} }, 'slice');
    expect(plain.taints).toBeUndefined();
  });

  it('reads role, dp size, KV-event and bootstrap ports from slice labels or annotations', () => {
    const model = load('    engine: sglang\n    kubernetes: { service: s }\n').models[0]!;
    const w = kubernetesWorker(
      model,
      7,
      {
        address: '10.1.2.3',
        port: 30000,
        labels: { 'kvgate.io/role': 'prefill', 'kvgate.io/dp-size': '2' },
        annotations: { 'kvgate.io/kv-events-port': '5557', 'kvgate.io/bootstrap-port': '8999' },
      },
      'slice',
    );
    expect(w).toMatchObject({
      id: 7,
      url: 'http://10.1.2.3:30000',
      role: 'prefill',
      dpSize: 2,
      bootstrap: { host: '10.1.2.3', port: 8999 },
    });
    expect(w.kvEvents?.endpoint).toBe('tcp://10.1.2.3:5557');
    expect(
      problemsOf(() =>
        kubernetesWorker(model, 8, { address: '10.1.2.4', port: 1, labels: {}, annotations: {} }, 'slice'),
      ),
    ).toEqual([
      'kvgate.io/kv-events-port: is required in router_mode kv with KV events on; set it, or set router.use_kv_events: false (approximate mode)',
    ]);
    expect(
      problemsOf(() =>
        kubernetesWorker(
          model,
          9,
          {
            address: '10.1.2.5',
            port: 1,
            labels: { 'kvgate.io/role': 'boss', 'kvgate.io/kv-events-port': '1' },
            annotations: {},
          },
          'slice',
        ),
      )[0],
    ).toMatch(/^role: must be one of/);
  });
});
