/**
 * `models[].client_pins: deny`: a client may not name its workers (pins skip the router queue and the overload
 * thresholds that share the workers among every client; `allowed_worker_ids` skips the queue). Before it, any client
 * could pin every request to one worker. `allow` (the default) keeps Dynamo's pins; direct mode needs it.
 */
import { describe, expect, it } from 'vitest';
import { loadGatewayConfig } from '../../src/config/index.js';
import { chat, harnessModels, post, start } from './server-harness.js';

/** The harness's models, demo's with `client_pins` as given. */
const models = (clientPins?: string): Record<string, unknown>[] =>
  harnessModels(clientPins !== undefined ? { client_pins: clientPins } : {});
const demo = (clientPins?: string): Record<string, unknown> => models(clientPins)[0]!;

describe('client_pins', () => {
  it('deny: a pin, in nvext or a header, and allowed_worker_ids are a 400 naming the field; the rest is served', async () => {
    const g = await start({ models: models('deny') });
    const url = `${g.url}/v1/chat/completions`;
    const refused: [Record<string, unknown>, Record<string, string>, string][] = [
      [{ nvext: { backend_instance_id: 2 } }, {}, 'nvext.backend_instance_id'],
      [{ nvext: { decode_worker_id: 2 } }, {}, 'nvext.decode_worker_id'],
      [{ nvext: { prefill_worker_id: 1 } }, {}, 'nvext.prefill_worker_id'],
      [{ nvext: { allowed_worker_ids: [2] } }, {}, 'nvext.allowed_worker_ids'],
      [{}, { 'x-worker-instance-id': '2' }, 'x-worker-instance-id'],
      [{}, { 'x-dynamo-prefill-instance-id': '1' }, 'x-dynamo-prefill-instance-id'],
    ];
    for (const [extra, headers, param] of refused) {
      const r = await post(url, chat('hi', extra), headers);
      expect(r.status, param).toBe(400);
      expect(r.json.error.code).toBe('KVG_ERR_INVALID_REQUEST');
      expect(r.json.error.param).toBe(param);
    }
    expect(g.routers.demo.routed).toHaveLength(0);
    const ok = await post(url, chat('hi', { nvext: { agent_hints: { osl: 10 } } }), { 'x-session-id': 's' });
    expect(ok.status).toBe(200);
  });

  it('allow (the default): pins are taken as before', async () => {
    const g = await start({ models: models() });
    const r = await post(`${g.url}/v1/chat/completions`, chat('hi', { nvext: { backend_instance_id: 2 } }));
    expect(r.status).toBe(200);
    expect(g.routers.demo.routed.at(-1)?.hints.backendInstanceId).toBe(2);
  });

  it('deny with router_mode direct is a config error', () => {
    const base = { log: { level: 'silent' }, models: [{ ...demo('deny'), router_mode: 'direct' }] };
    expect(() => loadGatewayConfig({ base, env: {} })).toThrow(/client_pins.*deny cannot serve router_mode direct/s);
    expect(
      loadGatewayConfig({ base: { router: { use_kv_events: false }, models: [demo()] }, env: {} }).models[0]!
        .clientPins,
    ).toBe('allow');
  });
});
