/**
 * Session lineage: a subagent names its parent session (`x-parent-session-id`,
 * Dynamo's `x-dynamo-parent-session-id`, `nvext.session_control.parent_session_id`, or Claude Code's headers).
 * With `session_affinity: pin` it is placed on the worker the parent's session is
 * bound to, even while the parent's own stream keeps that worker busier than the
 * other; with `cost` (KV mode's default) nothing pins it and the cost model sends
 * it, sharing nothing with the parent, to the idle worker. Either way a session in a
 * tool pause (no request in flight) books no load on its worker while its context
 * stays indexed there as cached blocks, and its next turn goes back there.
 * `kvgate serve` in front of two `kvgate mocker` engines (real processes, HTTP and ZMQ KV events).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { metric } from '../../helpers/metric-sum.js';
import { distinctWords, startKvGatewaySuite, type MockerSuite } from '../../helpers/serve-suite.js';
import { until } from '../../helpers/until.js';

const MODEL = 'mock-model';

describe.each(['pin', 'cost'] as const)('session lineage and tool pauses, session_affinity: %s', (affinity) => {
  let suite: MockerSuite;
  let url: string;
  const streams: AbortController[] = [];

  const post = (
    body: Record<string, unknown>,
    headers: Record<string, string> = {},
    signal?: AbortSignal,
    path = '/v1/chat/completions',
  ) =>
    fetch(`${url}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body: JSON.stringify({ model: MODEL, ...body }),
      ...(signal !== undefined ? { signal } : {}),
    });

  beforeAll(async () => {
    ({ suite, url } = await startKvGatewaySuite('session-lineage', MODEL, 2, [`session_affinity: ${affinity}`]));
  }, 60_000);

  afterAll(async () => {
    for (const c of streams) c.abort();
    await suite?.stop();
  });

  it("a paused session's worker is not charged load for it: its blocks count as cached there", async () => {
    const messages = [{ role: 'user', content: distinctWords('paused', 300) }];
    const turn = await post({ messages, max_tokens: 4 }, { 'x-session-id': 'paused' });
    expect(turn.status).toBe(200);
    await turn.text();
    const home = turn.headers.get('x-kvgate-worker')!;
    const on = { model: MODEL, worker_id: home };
    // The tool pause: no request in flight, so no load booked on the worker...
    await until(async () => (await metric(url, 'kvgate_worker_active_requests', on)) === 0, 'booking released');
    expect(await metric(url, 'kvgate_worker_active_decode_blocks', on)).toBe(0);
    expect(await metric(url, 'kvgate_worker_active_prefill_tokens', on)).toBe(0);
    // ...while its context stays indexed there as cached blocks, and the next turn goes back to it.
    const route = async (): Promise<number> =>
      Number(
        (
          (await (
            await post({ messages, nvext: { backend_instance_id: Number(home) } }, {}, undefined, '/v1/route')
          ).json()) as { overlap_blocks: number }
        ).overlap_blocks,
      );
    await until(async () => (await route()) > 0, 'context indexed on its worker');
    const next = await post({ messages, max_tokens: 1 }, { 'x-session-id': 'paused' });
    await next.text();
    expect(next.headers.get('x-kvgate-worker')).toBe(home);
  }, 60_000);

  it('a subagent follows its parent session to its worker, by header or nvext, only when sessions pin', async () => {
    // The parent's turn: a long stream, still running while its subagents start (it books load on its worker).
    const c = new AbortController();
    streams.push(c);
    const parent = await post(
      {
        messages: [{ role: 'user', content: distinctWords('app', 600) }],
        max_tokens: 20_000,
        ignore_eos: true,
        stream: true,
      },
      { 'x-session-id': 'parent' },
      c.signal,
    );
    expect(parent.status).toBe(200);
    const home = parent.headers.get('x-kvgate-worker');
    expect(['1', '2']).toContain(home);
    const other = home === '1' ? '2' : '1';

    // Without lineage a fresh session avoids the busy worker: the control.
    const control = await post(
      { messages: [{ role: 'user', content: distinctWords('ctl', 200) }], max_tokens: 1 },
      {
        'x-session-id': 'unrelated',
      },
    );
    await control.text();
    expect(control.headers.get('x-kvgate-worker')).toBe(other);

    const subagents: [string, Record<string, string>, Record<string, unknown>][] = [
      ['sub-1', { 'x-session-id': 'sub-1', 'x-parent-session-id': 'parent' }, {}],
      ['sub-2', { 'x-session-id': 'sub-2', 'x-dynamo-parent-session-id': 'parent' }, {}],
      ['sub-3', {}, { nvext: { session_control: { session_id: 'sub-3', parent_session_id: 'parent' } } }],
      // Claude Code's own headers: the conversation, and the subagent's agent id.
      ['sub-4', { 'x-claude-code-session-id': 'parent', 'x-claude-code-agent-id': 'sub-4' }, {}],
    ];
    for (const [name, headers, extra] of subagents) {
      const res = await post(
        { messages: [{ role: 'user', content: distinctWords(name, 200) }], max_tokens: 1, ...extra },
        headers,
      );
      expect(res.status, name).toBe(200);
      await res.text();
      expect(res.headers.get('x-kvgate-worker'), name).toBe(affinity === 'pin' ? home : other);
    }
    if (affinity === 'cost') return;
    // The subagent is bound now: its next turn goes there by its own session.
    const again = await post(
      { messages: [{ role: 'user', content: distinctWords('sub-1', 220) }], max_tokens: 1 },
      {
        'x-session-id': 'sub-1',
      },
    );
    await again.text();
    expect(again.headers.get('x-kvgate-worker')).toBe(home);
  }, 60_000);

  it('rejects a parent header that contradicts the nvext field, naming it', async () => {
    const res = await post(
      {
        messages: [{ role: 'user', content: 'hi' }],
        max_tokens: 1,
        nvext: { session_control: { session_id: 's', parent_session_id: 'a' } },
      },
      { 'x-parent-session-id': 'b' },
    );
    expect(res.status).toBe(400);
    const body = (await res.json()) as { error: { code: string; message: string } };
    expect(body.error.message).toContain('x-parent-session-id');
  });
});
