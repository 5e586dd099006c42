/**
 * `kvgate picker` when two listed pods share an endpoint: a pod's IP reused by its replacement while the old pod is
 * still listed (Ready, not yet marked for deletion), over real gRPC sockets (the test plays Envoy; the pods come from
 * the Kubernetes API double and are never dialled). The newer pod (created later) owns the endpoint: it is one
 * endpoint in the answer, one KV-event subscription, and the handover is a warn line and a count; the old pod leaving
 * the list later takes nothing of the new pod's (a subset hint and the served-endpoint readback still find it), and
 * listed again it does not take the endpoint back.
 */
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startPicker, type RunningPicker } from '../../../src/picker/index.js';
import { ExtProcClient, requestHeaders, structs } from '../../helpers/ext-proc-client.js';
import { KubeApiDouble, type Pod } from '../../helpers/kube-api-double.js';
import { sampleSum } from '../../helpers/metric-sum.js';
import { until } from '../../helpers/until.js';
import { picked } from './answers.js';
import { MODEL, pickerConfig } from './pool-config.js';

const REUSED = '127.0.0.21';
const X = `${REUSED}:8000`;
const Y = '127.0.0.22:8000';
const KV_PORT = '5557';

const pod = (name: string, ip: string, created: string): Pod => ({
  metadata: {
    name,
    labels: { app: 'reuse' },
    annotations: { 'kvgate.io/kv-events-port': KV_PORT },
    creationTimestamp: created,
  },
  status: { podIP: ip, conditions: [{ type: 'Ready', status: 'True' }] },
});

describe('kvgate picker: an endpoint listed for two pods (an IP reused while the old pod is still listed)', () => {
  let kube: KubeApiDouble;
  let picker: RunningPicker;
  let client: ExtProcClient;
  const logs: Record<string, unknown>[] = [];
  /** The pod lists the picker was handed (each an info line of the InferencePool source). */
  const listings = (): number => logs.filter((l) => /^InferencePool default\/reuse: /.test(String(l['msg']))).length;
  const membership = async (change: string): Promise<number> =>
    sampleSum(await (await fetch(picker.metricsUrl!)).text(), 'kvgate_worker_membership_changes_total', {
      source: 'inference_pool',
      change,
    });

  beforeAll(async () => {
    kube = await KubeApiDouble.start();
    kube.putPool({
      metadata: { name: 'reuse', namespace: 'default' },
      spec: { selector: { matchLabels: { app: 'reuse' } }, targetPorts: [{ number: 8000 }] },
    });
    kube.putPod(pod('vllm-old', REUSED, '2026-01-01T00:00:00Z'));
    kube.putPod(pod('vllm-other', '127.0.0.22', '2026-01-01T00:00:00Z'));
    const config = pickerConfig(kube.url, 'reuse', { use_kv_events: true }, { admin: { enabled: true } });
    const sink = { write: (line: string): void => void logs.push(JSON.parse(line) as Record<string, unknown>) };
    picker = await startPicker(config, pino({ level: 'info' }, sink));
    client = new ExtProcClient(picker.address);
    await until(async () => (await client.check('readiness')) === 'SERVING', 'the pool listed');
  }, 60_000);

  afterAll(async () => {
    client?.close();
    await picker?.stop();
    await kube?.close();
  });

  /** The answer to one request (the subset hint `subset` when given); the stream is left open when `open`. */
  async function pick(
    subset?: string[],
  ): Promise<{ answer: Record<string, unknown>; stream: ReturnType<ExtProcClient['open']> }> {
    const s = client.open();
    const hint =
      subset === undefined
        ? undefined
        : { 'envoy.lb.subset_hint': { 'x-gateway-destination-endpoint-subset': subset } };
    s.send(requestHeaders('/v1/chat/completions', {}, hint));
    const body = JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hello' }] });
    s.send({ request_body: { body: Buffer.from(body), end_of_stream: true } });
    const [answer] = await s.next(1);
    return { answer: answer!, stream: s };
  }

  it('routes the endpoint once, to the newer pod: one entry in the answer, one subscription, the handover told', async () => {
    kube.putPod(pod('vllm-new', REUSED, '2026-01-01T00:10:00Z'));
    await until(() => listings() === 2, 'the new pod listed');
    const { answer, stream } = await pick();
    stream.cancel();
    expect([picked(`${X},${Y}`), picked(`${Y},${X}`)]).toContainEqual(answer);
    expect(picker.footprint()).toMatchObject({
      endpoints: 2,
      ids: 2,
      names: 2,
      subscriptions: 2,
      listed: 3,
      shadowed: 1,
    });
    expect(logs.find((l) => /handed over/.test(String(l['msg'])))).toMatchObject({
      level: 40,
      endpoint: X,
      from: 'vllm-old',
      to: 'vllm-new',
    });
    expect(await membership('handed_over')).toBe(1);
    expect(await membership('shadowed')).toBe(1);
    await until(() => Object.keys(picker.bookings()).length === 0, 'the reset stream freed');
  });

  it("keeps the new pod's endpoint when the old pod leaves the list: a subset hint and the served readback find it", async () => {
    const before = { joined: await membership('joined'), left: await membership('left') };
    kube.deletePod('vllm-old');
    await until(() => listings() === 3, 'the old pod gone');

    const hinted = await pick([X]);
    hinted.stream.cancel();
    expect(hinted.answer).toEqual(picked(X));
    await until(() => Object.keys(picker.bookings()).length === 0, 'the reset stream freed');

    // Picked on Y, served by X (the data plane's fallback): the booking follows X.
    const fallback = await pick([Y]);
    expect(fallback.answer).toEqual(picked(Y));
    await fallback.stream.next(1); // the body passed on
    fallback.stream.send({
      response_headers: {
        headers: { headers: [{ key: ':status', raw_value: Buffer.from('200') }] },
        end_of_stream: false,
      },
      metadata_context: { filter_metadata: structs({ 'envoy.lb': { 'x-gateway-destination-endpoint-served': X } }) },
    });
    await fallback.stream.next(1);
    expect(picker.bookings()).toEqual({ [X]: 1 });
    fallback.stream.cancel();
    await until(() => Object.keys(picker.bookings()).length === 0, 'the reset stream freed');

    expect(picker.footprint()).toMatchObject({
      endpoints: 2,
      ids: 2,
      names: 2,
      subscriptions: 2,
      listed: 2,
      shadowed: 0,
    });
    // Nothing routed changed: no join, no leave, no handover; the shadowed pod's going is an info line.
    expect({ joined: await membership('joined'), left: await membership('left') }).toEqual(before);
    expect(await membership('handed_over')).toBe(1);
    expect(logs.find((l) => /vllm-old \(not routed.*is no longer listed/.test(String(l['msg'])))).toMatchObject({
      level: 30,
      endpoint: X,
    });
  });

  it('leaves the endpoint with the newer pod when the older one is listed again (its creationTimestamp decides)', async () => {
    kube.putPod(pod('vllm-old', REUSED, '2026-01-01T00:00:00Z'));
    await until(() => listings() === 4, 'the old pod listed again');
    expect(await membership('handed_over')).toBe(1);
    expect(await membership('shadowed')).toBe(2);
    expect(logs.find((l) => /^pod vllm-old is listed with endpoint/.test(String(l['msg'])))).toMatchObject({
      level: 40,
      endpoint: X,
      owner: 'vllm-new',
    });
    expect(picker.footprint()).toMatchObject({ endpoints: 2, ids: 2, names: 2, listed: 3, shadowed: 1 });
  });
});
