/**
 * `kvgate picker -c FILE` as an operator runs it (the compiled CLI, a real
 * process): it logs its gRPC address, becomes ready once the InferencePool's
 * pods are listed from the Kubernetes API double (no cluster runs here), picks
 * over ext_proc, follows a pod leaving, and exports its counts on /metrics.
 * `kvgate serve` refuses a model with an `inference_pool` (a picker's config).
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startCli, type CliProcess } from '../../helpers/cli-process.js';
import { ExtProcClient, requestHeaders } from '../../helpers/ext-proc-client.js';
import { KubeApiDouble } from '../../helpers/kube-api-double.js';
import { sampleSum } from '../../helpers/metric-sum.js';
import { BIN, ROOT } from '../../helpers/process.js';
import { until } from '../../helpers/until.js';

const pod = (name: string, ip: string, ready: boolean) => ({
  metadata: { name, labels: { app: 'engine' } },
  status: { podIP: ip, conditions: [{ type: 'Ready', status: ready ? ('True' as const) : ('False' as const) }] },
});

describe('kvgate picker (the CLI) against the Kubernetes API double', () => {
  let kube: KubeApiDouble;
  let dir: string;
  let file: string;
  let proc: CliProcess | undefined;
  let client: ExtProcClient | undefined;

  beforeAll(async () => {
    kube = await KubeApiDouble.start();
    kube.putPool({
      metadata: { name: 'llm-pool', namespace: 'default' },
      spec: { selector: { matchLabels: { app: 'engine' } }, targetPorts: [{ number: 8000 }] },
    });
    kube.putPod(pod('engine-0', '10.1.0.5', true));
    kube.putPod(pod('engine-1', '10.1.0.6', false));
    dir = mkdtempSync(join(tmpdir(), 'kvgate-picker-cli-'));
    file = join(dir, 'picker.yaml');
    writeFileSync(
      file,
      [
        'listen: { host: 127.0.0.1, port: 0 }',
        'admin: { enabled: true }',
        'preprocess: { threads: 0 }',
        'models:',
        '  - name: mock-model',
        '    tokenizer: demo',
        '    router: { use_kv_events: false }',
        `    inference_pool: { api_server: "${kube.url}", name: llm-pool, token_file: /nonexistent }`,
        '',
      ].join('\n'),
    );
  });

  afterAll(async () => {
    client?.close();
    await proc?.stop();
    await kube.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('serves the ready pods of the pool, follows a pod leaving, and counts what it did', async () => {
    proc = startCli(['picker', '-c', file]);
    const line = await proc.waitFor(/"grpc":"([^"]+)","metrics":"([^"]+)"/, 'kvgate picker listening');
    client = new ExtProcClient(line[1]!);
    await until(async () => (await client!.check('readiness')) === 'SERVING', 'the picker ready');
    const pick = async (): Promise<Record<string, unknown>> => {
      const s = client!.open();
      s.send(requestHeaders('/v1/chat/completions'));
      const body = JSON.stringify({ model: 'mock-model', messages: [{ role: 'user', content: 'hello' }] });
      s.send({ request_body: { body: Buffer.from(body), end_of_stream: true } });
      const [answer] = await s.next(1);
      s.cancel();
      return answer!;
    };
    // The one Ready pod, alone: the other is not Ready.
    expect(JSON.stringify(await pick())).toContain('"stringValue":"10.1.0.5:8000"');
    kube.putPod(pod('engine-0', '10.1.0.5', false));
    await proc.waitFor(/0 ready endpoints/, 'the pod that left');
    expect(((await pick()).immediate_response as { details: string }).details).toBe('KVG_ERR_NO_WORKERS');
    const text = await (await fetch(line[2]!)).text();
    expect(sampleSum(text, 'kvgate_picker_requests_total', { model: 'mock-model', outcome: 'picked' })).toBe(1);
    expect(sampleSum(text, 'kvgate_picker_requests_total', { model: 'mock-model', outcome: 'no_endpoint' })).toBe(1);
    expect(sampleSum(text, 'kvgate_picker_endpoints', { model: 'mock-model' })).toBe(0);
    // The pod's join (the first listing) and its leave, each counted: a flap between scrapes shows.
    const membership = { model: 'mock-model', source: 'inference_pool' };
    expect(sampleSum(text, 'kvgate_worker_membership_changes_total', { ...membership, change: 'joined' })).toBe(1);
    expect(sampleSum(text, 'kvgate_worker_membership_changes_total', { ...membership, change: 'left' })).toBe(1);
    expect(kube.requests).toContain('get inferencepool llm-pool');
    // The pods' watch falls behind what the server keeps (410 Gone): listed again at once, logged and counted.
    kube.compact();
    await proc.waitFor(/InferencePool default\/llm-pool: too old resource version; listing again/, 'the relist');
    await until(
      async () =>
        sampleSum(await (await fetch(line[2]!)).text(), 'kvgate_discovery_watch_transitions_total', {
          model: 'mock-model',
          source: 'inference_pool',
          transition: 'relisted',
        }) === 1,
      'the relist counted',
    );
  });

  it('kvgate serve refuses a model with an inference_pool, naming kvgate picker', () => {
    const r = spawnSync(process.execPath, [BIN, 'serve', '-c', file], { cwd: ROOT, encoding: 'utf8', timeout: 20_000 });
    expect(r.status).toBe(2);
    expect(r.stderr).toBe(
      'kvgate serve: model mock-model: inference_pool is read by kvgate picker; kvgate serve takes a ' +
        "Service's ready endpoints with a kubernetes section instead\n",
    );
  });
});
