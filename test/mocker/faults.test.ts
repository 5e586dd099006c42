/** Fault injection through the admin endpoint and the in-process handle: errors, hang, slow, crash and restart, event faults. */
import { afterEach, describe, expect, it } from 'vitest';
import { startMocker, type MockerHandle, type MockerInput } from '../../src/mocker/index.js';
import { postJson, subscribeEvents, until, type EventStream } from './helpers.js';

const open: MockerHandle[] = [];
const streams: EventStream[] = [];
async function mocker(input: MockerInput = {}): Promise<MockerHandle> {
  const m = await startMocker({ speedup: 20, ...input });
  open.push(m);
  return m;
}
afterEach(async () => {
  for (const s of streams.splice(0)) s.close();
  await Promise.all(open.splice(0).map((m) => m.close()));
});

const admin = (m: MockerHandle, faults: Record<string, unknown>) => postJson(`${m.url}/admin/faults`, faults);
const complete = (m: MockerHandle, extra: Record<string, unknown> = {}) =>
  postJson(`${m.url}/v1/completions`, { prompt: [1, 2, 3, 4, 5], max_tokens: 2, ...extra });

describe('fault injection', () => {
  it('error rate: injected 500s, then normal service again', async () => {
    const m = await mocker({ kvEvents: false });
    expect((await admin(m, { error_rate: 1 })).json.faults.error_rate).toBe(1);
    const r = await complete(m);
    expect(r.status).toBe(500);
    expect(r.json.error).toMatchObject({ code: 'KVG_ERR_INTERNAL', type: 'server_error' });
    expect(r.json.error.message).toMatch(/injected fault/);
    await admin(m, { error_rate: 0 });
    expect((await complete(m)).status).toBe(200);
    expect(await (await fetch(`${m.url}/metrics`)).text()).toMatch(
      /kvgate_mocker_injected_errors_total\{model_name="mock-model"\} 1/,
    );
    // A rate in between fails a deterministic share (seeded).
    m.setFaults({ errorRate: 0.5 });
    const statuses: number[] = [];
    for (let i = 0; i < 20; i++) statuses.push((await complete(m)).status);
    const failures = statuses.filter((s) => s === 500).length;
    expect(failures).toBeGreaterThan(3);
    expect(failures).toBeLessThan(17);
  });

  it('rejects unknown faults and bad values with 400, keeping the old settings', async () => {
    const m = await mocker({ kvEvents: false });
    expect((await admin(m, { explode: true })).status).toBe(400);
    expect((await admin(m, { error_rate: 2 })).status).toBe(400);
    expect((await admin(m, { slow_factor: 0 })).status).toBe(400);
    expect((await postJson(`${m.url}/admin/faults`, '{oops')).status).toBe(400);
    const current = await (await fetch(`${m.url}/admin/faults`)).json();
    expect(current).toEqual({
      faults: {
        hang: false,
        slow_factor: 1,
        error_rate: 0,
        error_status: 500,
        drop_event_rate: 0,
        drop_next_event_batches: 0,
        reorder_events: false,
        stall_after_tokens: null,
        error_after_tokens: null,
        garbage_event_flood: 0,
      },
    });
    expect((await admin(m, { stall_after_tokens: -1 })).status).toBe(400);
    expect((await admin(m, { error_after_tokens: 1.5 })).status).toBe(400);
  });

  it("error_after_tokens: a stream sends that many tokens, then vLLM's error event and [DONE]; null lifts it", async () => {
    const m = await mocker({ kvEvents: false });
    expect((await admin(m, { error_after_tokens: 3, error_status: 503 })).json.faults.error_after_tokens).toBe(3);
    const res = await fetch(`${m.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ prompt: [1, 2, 3, 4, 5], max_tokens: 8, stream: true }),
    });
    expect(res.status).toBe(200);
    const frames = (await res.text()).split('\n\n').filter((f) => f !== '');
    expect(frames).toHaveLength(5);
    expect(frames.slice(0, 3).every((f) => JSON.parse(f.slice(6)).choices !== undefined)).toBe(true);
    expect(JSON.parse(frames[3]!.slice(6))).toMatchObject({ error: { object: 'error', code: 503 } });
    expect(frames[4]).toBe('data: [DONE]');
    // Unstreamed answers are not touched; null lifts the fault.
    expect((await complete(m)).status).toBe(200);
    await admin(m, { error_after_tokens: null });
    const whole = await (
      await fetch(`${m.url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ prompt: [1, 2, 3, 4, 5], max_tokens: 8, stream: true }),
      })
    ).text();
    expect(whole).not.toMatch(/"error"/);
    expect(whole).toMatch(/data: \[DONE\]/);
  });

  it('stall_after_tokens: a stream sends that many tokens, then nothing, with its connection open; null lifts it', async () => {
    const m = await mocker({ kvEvents: false });
    expect((await admin(m, { stall_after_tokens: 2 })).json.faults.stall_after_tokens).toBe(2);
    const ac = new AbortController();
    const res = await fetch(`${m.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      signal: ac.signal,
      body: JSON.stringify({ prompt: [1, 2, 3, 4, 5], max_tokens: 8, stream: true }),
    });
    const reader = res.body!.getReader();
    let text = '';
    await until(async () => {
      text += new TextDecoder().decode((await reader.read()).value);
      return (text.match(/^data: \{/gm) ?? []).length >= 2;
    }, 'two token chunks');
    // The engine finishes the request internally; the answer never ends.
    await until(
      () => m.stats().ranks[0]!.running === 0 && m.stats().ranks[0]!.generationTokens >= 8,
      'the engine to finish the request',
    );
    expect(text).not.toMatch(/\[DONE\]/);
    expect((text.match(/^data: \{/gm) ?? []).length).toBe(2);
    ac.abort();
    await admin(m, { stall_after_tokens: null });
    expect((await complete(m)).status).toBe(200);
  });

  it('hang: requests and health checks stall until the hang is lifted; admin still answers', async () => {
    const m = await mocker({ kvEvents: false });
    await admin(m, { hang: true });
    let settled = false;
    const pending = complete(m).then((r) => {
      settled = true;
      return r;
    });
    await expect(fetch(`${m.url}/health`, { signal: AbortSignal.timeout(150) })).rejects.toThrow();
    expect((await fetch(`${m.url}/admin/state`)).status).toBe(200);
    expect(settled).toBe(false);
    await admin(m, { hang: false });
    expect((await pending).status).toBe(200);
    expect((await fetch(`${m.url}/health`)).status).toBe(200);
  });

  it('hang stalls a running stream; lifting it resumes the stream', async () => {
    const m = await mocker({ kvEvents: false, speedup: 50 });
    const res = await fetch(`${m.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ prompt: [1, 2, 3], max_tokens: 30, stream: true }),
    });
    const reader = res.body!.getReader();
    await reader.read();
    m.setFaults({ hang: true });
    const frozenAt = m.stats().ranks[0]!.generationTokens;
    expect(frozenAt).toBeLessThan(30);
    // Admin round trips take real time; the engine must not step meanwhile.
    for (let i = 0; i < 3; i++) await fetch(`${m.url}/admin/state`);
    expect(m.stats().ranks[0]!.generationTokens).toBeLessThanOrEqual(frozenAt + 1); // at most the step in flight
    m.setFaults({ hang: false });
    let text = '';
    for (let r = await reader.read(); !r.done; r = await reader.read()) text += Buffer.from(r.value).toString();
    expect(text.endsWith('data: [DONE]\n\n')).toBe(true);
  });

  it('slow: steps take slow_factor times longer in wall time', async () => {
    const m = await mocker({ kvEvents: false, speedup: 10 });
    const timed = async (prompt: number[]): Promise<number> => {
      const t0 = performance.now();
      await postJson(`${m.url}/v1/completions`, { prompt, max_tokens: 1 });
      return performance.now() - t0;
    };
    const prompt = (k: number): number[] => Array.from({ length: 2048 }, (_, i) => i + k * 3000);
    await timed(prompt(0)); // warm
    m.setFaults({ slowFactor: 40 });
    // The step's model time is ~4.9 ms at this speedup, so ~196 ms slowed. Only a lower bound holds on a busy
    // machine (a step can take longer, never shorter); comparing against an unslowed request's wall time did not.
    expect(await timed(prompt(1))).toBeGreaterThan(180);
  });

  it('crash closes every socket; restart serves again on the same ports with a fresh engine and seq 0', async () => {
    const m = await mocker({ kvEventsEncoding: 'array', blockSize: 4 });
    const events = await subscribeEvents(m);
    streams.push(events);
    const port = m.port;
    const oldId = m.engineId;
    const res = await fetch(`${m.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ prompt: [1, 2, 3], max_tokens: 1000, stream: true }),
    });
    const reader = res.body!.getReader();
    await reader.read();
    expect((await postJson(`${m.url}/admin/crash`, {})).status).toBe(202);
    await until(() => m.stats().crashed, 'the crash');
    // The in-flight stream is cut and nothing listens any more.
    await expect(
      (async () => {
        for (let r = await reader.read(); !r.done; r = await reader.read());
      })(),
    ).rejects.toThrow();
    await expect(fetch(`${m.url}/health`)).rejects.toThrow();

    await m.restart();
    expect(m.port).toBe(port);
    expect(m.engineId).not.toBe(oldId);
    expect((await fetch(`${m.url}/health`)).status).toBe(200);
    // Fresh cache, and the KV-event sequence starts again at 0.
    const r = await complete(m, { prompt: [10, 11, 12, 13, 14] });
    expect(r.json.usage.prompt_tokens_details.cached_tokens).toBe(0);
    expect(m.stats().ranks[0]!.nextEventSeq).toBe(1);
    // The old subscriber reconnects by itself (ZMQ). Batches of the stream cut by the crash
    // (prompt 1, 2, 3) may still be queued: skip them.
    const nextAfterRestart = async (timeoutMs: number) => {
      for (;;) {
        const msg = await events.next(timeoutMs).catch(() => undefined);
        if (msg === undefined || msg.batch[1][0][3]?.[0] !== 1) return msg;
      }
    };
    let sent = 1;
    for (;;) {
      const k = 20 + sent * 5;
      await complete(m, { prompt: [k, k + 1, k + 2, k + 3, k + 4] });
      sent++;
      const msg = await nextAfterRestart(300);
      if (msg !== undefined) {
        expect(msg.seq).toBeLessThan(BigInt(sent)); // numbered from 0 again, not continuing
        expect(msg.batch[1][0][3]).toEqual([k, k + 1, k + 2, k + 3]);
        break;
      }
      expect(sent).toBeLessThan(30);
    }
  });

  it('event faults are settable through the admin endpoint', async () => {
    const m = await mocker({});
    const r = await admin(m, { drop_next_event_batches: 2, reorder_events: true, drop_event_rate: 0.25 });
    expect(r.json.faults).toMatchObject({ drop_next_event_batches: 2, reorder_events: true, drop_event_rate: 0.25 });
    expect(m.faults.dropNextEventBatches).toBe(2);
    expect((await postJson(`${m.url}/admin/restart_event_sequence`, {})).json).toEqual({ next_seq: 0 });
  });

  it('faults can be set at start', async () => {
    const m = await mocker({ kvEvents: false, faults: { errorRate: 1 } });
    expect((await complete(m)).status).toBe(500);
    await expect(startMocker({ faults: { errorRate: 3 } })).rejects.toThrow(/errorRate=3/);
  });
});
