/**
 * Both P/D protocols end to end between a prefill and a decode mocker, driven
 * by a test client the way a router drives them.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { startMocker, type MockerHandle, type MockerInput } from '../../src/mocker/index.js';
import { postJson, readSse, until } from './helpers.js';

const open: MockerHandle[] = [];
async function mocker(input: MockerInput): Promise<MockerHandle> {
  const m = await startMocker({ speedup: 50, kvEvents: false, ...input });
  open.push(m);
  return m;
}
afterEach(async () => {
  await Promise.all(open.splice(0).map((m) => m.close()));
});

const prompt = Array.from({ length: 200 }, (_, i) => 40 + i);

describe('vLLM style: kv_transfer_params', () => {
  it('prefill returns a ticket; decode pulls the blocks and streams the answer', async () => {
    const p = await mocker({ mode: 'prefill' });
    const d = await mocker({ mode: 'decode' });
    const body = { prompt, max_tokens: 6, seed: 3 };
    const pr = await postJson(
      `${p.url}/v1/completions`,
      {
        ...body,
        max_tokens: 1,
        stream: false,
        kv_transfer_params: {
          do_remote_decode: true,
          do_remote_prefill: false,
          remote_engine_id: null,
          remote_block_ids: null,
          remote_host: null,
          remote_port: null,
        },
      },
      { 'x-request-id': 'pd-1' },
    );
    expect(pr.status).toBe(200);
    const ticket = pr.json.kv_transfer_params;
    expect(ticket).toMatchObject({
      do_remote_prefill: true,
      do_remote_decode: false,
      remote_engine_id: `${p.engineId}_dp0`,
      remote_host: '127.0.0.1',
      remote_port: p.port,
      tp_size: 1,
      remote_num_tokens: 200,
    });
    expect(ticket.remote_block_ids).toEqual([[...Array(13).keys()]]); // 200 tokens -> 13 blocks of 16
    expect(p.stats().ranks[0]!.heldRequests).toBe(1);

    const res = await fetch(`${d.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-request-id': 'pd-1' },
      body: JSON.stringify({
        ...body,
        stream: true,
        stream_options: { include_usage: true },
        kv_transfer_params: ticket,
      }),
    });
    expect(res.status).toBe(200);
    const events = await readSse(res);
    const chunks = events.slice(0, -1).map((e) => JSON.parse(e));
    expect(chunks.filter((c) => c.choices.length === 1)).toHaveLength(6);
    expect(chunks.at(-1).usage).toMatchObject({ prompt_tokens: 200, completion_tokens: 6 });
    // The prefill engine released its blocks once they were pulled.
    expect(p.stats().ranks[0]!.heldRequests).toBe(0);
    expect(p.stats().ranks[0]!.activeBlocks).toBe(0);
    // The decode engine did not prefill: it computed one token, then decoded.
    const ds = d.stats().ranks[0]!;
    expect(ds.prefixHitTokens).toBe(0);
    expect(ds.generationTokens).toBe(6);
    // Same seed, same tokens as the aggregated engine would give.
    const agg = await mocker({});
    const ar = await postJson(`${agg.url}/v1/completions`, body);
    expect(
      chunks
        .slice(0, 6)
        .map((c) => c.choices[0].text)
        .join(''),
    ).toBe(ar.json.choices[0].text);
  });

  it('a decode engine without kv_transfer_params fails clearly (400)', async () => {
    const d = await mocker({ mode: 'decode' });
    const r = await postJson(`${d.url}/v1/completions`, { prompt, max_tokens: 2 });
    expect(r.status).toBe(400);
    expect(r.json.error.param).toBe('kv_transfer_params');
    expect(r.json.error.message).toMatch(/kv_transfer_params from a prefill engine are required/);
    const partial = await postJson(`${d.url}/v1/completions`, {
      prompt,
      max_tokens: 2,
      kv_transfer_params: { do_remote_prefill: true },
    });
    expect(partial.status).toBe(400);
    expect(partial.json.error.message).toMatch(/remote_engine_id is missing/);
  });

  it('stale tickets fail with KVG_ERR_KV_TRANSFER_FAILED: used twice, after a restart, or for blocks that are gone', async () => {
    const p = await mocker({ mode: 'prefill', kvLeaseMs: 60_000 });
    const d = await mocker({ mode: 'decode' });
    const getTicket = async (): Promise<Record<string, unknown>> =>
      (
        await postJson(`${p.url}/v1/completions`, {
          prompt,
          max_tokens: 1,
          kv_transfer_params: { do_remote_decode: true },
        })
      ).json.kv_transfer_params;
    const t1 = await getTicket();
    expect((await postJson(`${d.url}/v1/completions`, { prompt, max_tokens: 1, kv_transfer_params: t1 })).status).toBe(
      200,
    );
    const again = await postJson(`${d.url}/v1/completions`, { prompt, max_tokens: 1, kv_transfer_params: t1 });
    expect(again.status).toBe(502);
    expect(again.json.error.code).toBe('KVG_ERR_KV_TRANSFER_FAILED');
    expect(again.json.error.message).toMatch(/already pulled/);

    const t2 = await getTicket();
    const wrongBlocks = await postJson(`${d.url}/v1/completions`, {
      prompt,
      max_tokens: 1,
      kv_transfer_params: { ...t2, remote_block_ids: [[99, 100]] },
    });
    expect(wrongBlocks.json.error.message).toMatch(/block ids do not match/);
    const otherPrompt = await postJson(`${d.url}/v1/completions`, {
      prompt: prompt.slice(0, 50),
      max_tokens: 1,
      kv_transfer_params: t2,
    });
    expect(otherPrompt.json.error.message).toMatch(/computed 200 prompt tokens but this prompt has 50/);

    const t3 = await getTicket();
    await p.restart();
    const afterRestart = await postJson(`${d.url}/v1/completions`, { prompt, max_tokens: 1, kv_transfer_params: t3 });
    expect(afterRestart.status).toBe(502);
    expect(afterRestart.json.error.message).toMatch(/stale kv_transfer_params/);

    await p.close();
    const unreachable = await postJson(`${d.url}/v1/completions`, { prompt, max_tokens: 1, kv_transfer_params: t3 });
    expect(unreachable.json.error.message).toMatch(/cannot reach the prefill engine/);
    // The decode engine keeps serving.
    expect((await fetch(`${d.url}/health`)).status).toBe(200);
  });
});

describe('SGLang style: bootstrap rendezvous', () => {
  const bootstrapBody = (p: MockerHandle, room: bigint | number): Record<string, unknown> => ({
    prompt,
    max_tokens: 5,
    seed: 9,
    bootstrap_host: '127.0.0.1',
    bootstrap_port: p.bootstrapPort,
    bootstrap_room: room,
  });

  it('prefill and decode posted together complete; decode honours room % prefill_dp_size', async () => {
    const p = await mocker({ engine: 'sglang', mode: 'prefill', dpSize: 2 });
    const d = await mocker({ engine: 'sglang', mode: 'decode' });
    expect(p.bootstrapPort).toBeGreaterThan(0);
    // A 63-bit room: the rank must come from its exact value (odd -> rank 1).
    const room = 9_007_199_254_740_993n; // 2^53 + 1: not representable as a JSON double
    const raw = JSON.stringify(bootstrapBody(p, 0)).replace('"bootstrap_room":0', `"bootstrap_room":${room}`);
    const [pr, dr] = await Promise.all([
      postJson(`${p.url}/v1/completions`, raw),
      postJson(`${d.url}/v1/completions`, raw),
    ]);
    expect(pr.status).toBe(200);
    expect(pr.json.usage.completion_tokens).toBe(1); // the prefill side produces one token
    expect(dr.status).toBe(200);
    expect(dr.json.usage).toMatchObject({ prompt_tokens: 200, completion_tokens: 5 });
    expect(p.stats().ranks[1]!.promptTokens).toBe(200);
    expect(p.stats().ranks[0]!.promptTokens).toBe(0);
    expect(p.stats().bootstrapPending).toBe(0);
  });

  it('decode-first arrival: decode waits at the bootstrap server until the prefill request comes', async () => {
    const p = await mocker({ engine: 'sglang', mode: 'prefill' });
    const d = await mocker({ engine: 'sglang', mode: 'decode' });
    const body = bootstrapBody(p, 77);
    const decoding = postJson(`${d.url}/v1/completions`, body);
    await until(() => p.stats().bootstrapPending === 1, 'the decode side to register at the bootstrap server');
    const pr = await postJson(`${p.url}/v1/completions`, body);
    expect(pr.status).toBe(200);
    const dr = await decoding;
    expect(dr.status).toBe(200);
    expect(dr.json.usage.completion_tokens).toBe(5);
  });

  it('streams from the decode side', async () => {
    const p = await mocker({ engine: 'sglang', mode: 'prefill' });
    const d = await mocker({ engine: 'sglang', mode: 'decode' });
    const body = { ...bootstrapBody(p, 5), stream: true };
    const [, res] = await Promise.all([
      postJson(`${p.url}/v1/completions`, { ...body, stream: false }),
      fetch(`${d.url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(body),
      }),
    ]);
    const events = await readSse(res);
    expect(events.at(-1)).toBe('[DONE]');
    expect(events.length).toBe(6);
  });

  it('times out cleanly on both sides when the partner never comes', async () => {
    const p = await mocker({ engine: 'sglang', mode: 'prefill', bootstrapTimeoutMs: 150 });
    const d = await mocker({ engine: 'sglang', mode: 'decode' });
    const lonelyDecode = await postJson(`${d.url}/v1/completions`, bootstrapBody(p, 1));
    expect(lonelyDecode.status).toBe(504);
    expect(lonelyDecode.json.error.code).toBe('KVG_ERR_REQUEST_TIMEOUT');
    expect(lonelyDecode.json.error.message).toMatch(/no prefill request arrived within 150 ms/);
    const lonelyPrefill = await postJson(`${p.url}/v1/completions`, bootstrapBody(p, 2));
    expect(lonelyPrefill.status).toBe(504);
    expect(lonelyPrefill.json.error.message).toMatch(/no decode request arrived/);
    expect(p.stats().bootstrapPending).toBe(0);
    expect(p.stats().ranks[0]!.activeBlocks).toBe(0);
    expect(d.stats().ranks[0]!.activeBlocks).toBe(0);
    // Both keep serving.
    const [pr, dr] = await Promise.all([
      postJson(`${p.url}/v1/completions`, bootstrapBody(p, 3)),
      postJson(`${d.url}/v1/completions`, bootstrapBody(p, 3)),
    ]);
    expect([pr.status, dr.status]).toEqual([200, 200]);
  });

  it('engines in a P/D role without bootstrap fields answer 400', async () => {
    const d = await mocker({ engine: 'sglang', mode: 'decode' });
    const r = await postJson(`${d.url}/v1/completions`, { prompt, max_tokens: 1 });
    expect(r.status).toBe(400);
    expect(r.json.error.message).toMatch(/bootstrap_host, bootstrap_port and bootstrap_room are required/);
  });
});
