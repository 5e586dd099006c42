/**
 * `kvgate picker`: a request in flight when its endpoint is handed over (a pod's IP reused by its replacement while
 * the old pod is still listed), over real gRPC sockets (the test plays Envoy; the pods come from the Kubernetes API
 * double and are never dialled). The router's load on the endpoint is what it was before the handover (the request
 * counted once, with the cached prefix it was booked with, not its whole prompt again), its first token takes its
 * prompt load off, and its end frees it once: the endpoint is idle after, and a later request counts one.
 */
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startPicker, type RunningPicker } from '../../../src/picker/index.js';
import { ExtProcClient, requestHeaders, structs } from '../../helpers/ext-proc-client.js';
import { KubeApiDouble, type Pod } from '../../helpers/kube-api-double.js';
import { until } from '../../helpers/until.js';
import { picked } from './answers.js';
import { MODEL, pickerConfig } from './pool-config.js';

const REUSED = '127.0.0.31';
const X = `${REUSED}:8000`;
const Y = '127.0.0.32:8000';
/** A prompt of several blocks (block_size 16), so that its cached prefix is most of its prompt load. */
const PROMPT = Array.from({ length: 120 }, (_, i) => `word${i}`).join(' ');

const pod = (name: string, ip: string, created: string): Pod => ({
  metadata: { name, labels: { app: 'handover' }, creationTimestamp: created },
  status: { podIP: ip, conditions: [{ type: 'Ready', status: 'True' }] },
});

describe('kvgate picker: a request in flight across a handover of its endpoint', () => {
  let kube: KubeApiDouble;
  let picker: RunningPicker;
  let client: ExtProcClient;
  const logs: Record<string, unknown>[] = [];
  const listings = (): number => logs.filter((l) => /^InferencePool default\/handover: /.test(String(l['msg']))).length;
  const inFlight = (): number => Object.values(picker.loads()).reduce((n, l) => n + l.activeRequests, 0);

  beforeAll(async () => {
    kube = await KubeApiDouble.start();
    kube.putPool({
      metadata: { name: 'handover', namespace: 'default' },
      spec: { selector: { matchLabels: { app: 'handover' } }, targetPorts: [{ number: 8000 }] },
    });
    kube.putPod(pod('vllm-old', REUSED, '2026-01-01T00:00:00Z'));
    kube.putPod(pod('vllm-other', '127.0.0.32', '2026-01-01T00:00:00Z'));
    const sink = { write: (line: string): void => void logs.push(JSON.parse(line) as Record<string, unknown>) };
    picker = await startPicker(pickerConfig(kube.url, 'handover'), pino({ level: 'info' }, sink));
    client = new ExtProcClient(picker.address);
    await until(async () => (await client.check('readiness')) === 'SERVING', 'the pool listed');
  }, 60_000);

  afterAll(async () => {
    client?.close();
    await picker?.stop();
    await kube?.close();
  });

  /** A stream that sent PROMPT with the subset hint X, once it is picked and its body passed on. */
  async function pickOnX(): Promise<ReturnType<ExtProcClient['open']>> {
    const s = client.open();
    s.send(
      requestHeaders(
        '/v1/chat/completions',
        {},
        { 'envoy.lb.subset_hint': { 'x-gateway-destination-endpoint-subset': [X] } },
      ),
    );
    const body = JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: PROMPT }] });
    s.send({ request_body: { body: Buffer.from(body), end_of_stream: true } });
    const [answer] = await s.next(2);
    expect(answer).toEqual(picked(X));
    return s;
  }

  it('counts it once, with the load it was booked with, and frees it once when its response ends', async () => {
    // The prompt routed to X once: the router records it there (approximate mode), so the next one is mostly cached.
    const first = await pickOnX();
    first.cancel();
    await until(() => inFlight() === 0, 'the first request freed');

    const s = await pickOnX();
    const before = picker.loads()[X]!;
    expect(before.activeRequests).toBe(1);
    expect(before.activeDecodeBlocks).toBeGreaterThanOrEqual(7);
    // Its cached prefix is not prompt load: what is left is less than a block.
    expect(before.activePrefillTokens).toBeLessThan(16);

    kube.putPod(pod('vllm-new', REUSED, '2026-01-01T00:10:00Z'));
    await until(() => listings() === 2, 'the new pod listed');
    expect(logs.find((l) => /handed over/.test(String(l['msg'])))).toMatchObject({ from: 'vllm-old', to: 'vllm-new' });
    // During: the same load on X (now vllm-new's worker), the request counted once in all.
    expect(picker.loads()).toEqual({
      [X]: before,
      [Y]: { activeRequests: 0, activePrefillTokens: 0, activeDecodeBlocks: 0 },
    });
    expect(picker.bookings()).toEqual({ [X]: 1 });
    expect(inFlight()).toBe(1);

    // Served by X; its first token takes the prompt load off.
    s.send({
      response_headers: {
        headers: { headers: [{ key: ':status', raw_value: Buffer.from('200') }] },
        end_of_stream: false,
      },
      metadata_context: { filter_metadata: structs({ 'envoy.lb': { 'x-gateway-destination-endpoint-served': X } }) },
    });
    await s.next(1);
    s.send({ response_body: { body: Buffer.from('data: {}\n\n'), end_of_stream: false } });
    await s.next(1);
    expect(picker.loads()[X]).toEqual({ ...before, activePrefillTokens: 0 });

    // After: its response's end frees it, once; the endpoint is idle, and a later request on it counts one.
    s.send({ response_body: { body: Buffer.from('data: [DONE]\n\n'), end_of_stream: true } });
    await s.next(1);
    expect(picker.bookings()).toEqual({});
    expect(picker.loads()[X]).toEqual({ activeRequests: 0, activePrefillTokens: 0, activeDecodeBlocks: 0 });
    const later = await pickOnX();
    expect(picker.loads()[X]!.activeRequests).toBe(1);
    later.cancel();
    await until(() => inFlight() === 0, 'the later request freed');
    expect(picker.footprint()).toMatchObject({ endpoints: 2, routerWorkers: 2, bookings: 0, shadowed: 1 });
  });
});
