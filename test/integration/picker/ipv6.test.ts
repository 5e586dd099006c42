/**
 * `kvgate picker` over an IPv6 pool, over real gRPC sockets (the test plays
 * Envoy; the pods come from the Kubernetes API double and are never dialled:
 * the picker only names them). GIE's protocol writes an endpoint `ip:port`,
 * an IPv6 one bracketed as Envoy and GIE's EPP (Go's net.JoinHostPort) write
 * it, `[fd00::1]:8000`; a subset-hint entry may also be a bare address for
 * any port, and a bare IPv6 address is unbracketed (`fd00::1`), as GIE's
 * lightweight EPP reads it. Each such entry must match its pod.
 */
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startPicker, type RunningPicker } from '../../../src/picker/index.js';
import { ExtProcClient, requestHeaders } from '../../helpers/ext-proc-client.js';
import { KubeApiDouble } from '../../helpers/kube-api-double.js';
import { until } from '../../helpers/until.js';
import { immediate, picked } from './answers.js';
import { MODEL, pickerConfig } from './pool-config.js';

const pod = (name: string, ip: string) => ({
  metadata: { name, labels: { app: 'v6' } },
  status: { podIP: ip, conditions: [{ type: 'Ready', status: 'True' as const }] },
});

describe('kvgate picker: IPv6 endpoints in the answer, the subset hint and the conformance header', () => {
  let kube: KubeApiDouble;
  let picker: RunningPicker;
  let client: ExtProcClient;

  beforeAll(async () => {
    kube = await KubeApiDouble.start();
    kube.putPool({
      metadata: { name: 'v6-pool', namespace: 'default' },
      spec: { selector: { matchLabels: { app: 'v6' } }, targetPorts: [{ number: 8000 }] },
    });
    kube.putPod(pod('v6-0', 'fd00::1'));
    kube.putPod(pod('v6-1', 'fd00::2'));
    const config = pickerConfig(kube.url, 'v6-pool', {}, {}, { conformance_hooks: true });
    picker = await startPicker(config, pino({ level: 'silent' }));
    client = new ExtProcClient(picker.address);
    await until(async () => (await client.check('readiness')) === 'SERVING', 'the IPv6 pool listed');
  }, 60_000);

  afterAll(async () => {
    client?.close();
    await picker?.stop();
    await kube?.close();
  });

  /** The answer to one request whose pick is limited by the subset hint `subset` or the conformance header. */
  async function pick(subset: string[] | undefined, selection?: string): Promise<Record<string, unknown>> {
    const s = client.open();
    const hint =
      subset === undefined
        ? undefined
        : { 'envoy.lb.subset_hint': { 'x-gateway-destination-endpoint-subset': subset } };
    const extra: Record<string, string> = selection === undefined ? {} : { 'test-epp-endpoint-selection': selection };
    s.send(requestHeaders('/v1/chat/completions', extra, hint));
    const body = JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hello' }] });
    s.send({ request_body: { body: Buffer.from(body), end_of_stream: true } });
    const [answer] = await s.next(1);
    s.cancel();
    return answer!;
  }

  it('names the pick [ip]:port, and matches a hint entry bracketed, bare, or spelled otherwise', async () => {
    for (const subset of [['[fd00::2]:8000'], ['fd00::2'], ['[fd00::2]'], ['[FD00:0:0::2]:8000'], ['fd00:0::2']])
      expect(await pick(subset), subset[0]).toEqual(picked('[fd00::2]:8000'));
    // The conformance harness names a pod by its bare IP.
    expect(await pick(undefined, 'fd00::1')).toEqual(picked('[fd00::1]:8000'));
    // Another port of the pod's address, or an address of no pod: none of the subset is eligible.
    const none = immediate(503, 'KVG_ERR_NO_WORKERS', 'no endpoint of the pool is ready for this request');
    for (const subset of [['[fd00::2]:9000'], ['fd00::2:8000']]) expect(await pick(subset), subset[0]).toEqual(none);
    await until(() => Object.keys(picker.bookings()).length === 0, 'the reset streams freed');
  });
});
