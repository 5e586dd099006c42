/**
 * Session-start priority end to end: `kvgate serve` with `session_priority: lower_first` in front of a `kvgate mocker`
 * engine in vLLM's priority scheduling, one running request at a time (real processes, HTTP and ZMQ). While a long
 * stream holds the engine, a new session's turn arrives, then an older session's, then a request whose client set its
 * own `priority` 0 (its tenant class's `engine_priority` allows it); the stream is then cancelled: the engine serves
 * the client's first, then the older session's, then the new one's. The same gateway with `session_priority` off
 * forwards no priority but the client's 0 (vLLM's default), so the engine serves them as they came.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { engineAnswerOrder } from '../../helpers/engine-order.js';
import {
  serveConfig,
  serveInSuite,
  startMockerSuite,
  workerEntry,
  type MockerSuite,
} from '../../helpers/serve-suite.js';

const MODEL = 'mock-model';

describe('session_priority', () => {
  let suite: MockerSuite;
  let engineUrl: string;
  const gateways: Record<'on' | 'off' | 'bounded', string> = { on: '', off: '', bounded: '' };

  beforeAll(async () => {
    suite = await startMockerSuite(
      'session-priority',
      ['--tokenizer', 'demo', '--scheduling-policy', 'priority', '--max-num-seqs', '1'],
      1,
    );
    const engine = suite.engines[0]!;
    engineUrl = engine.url;
    for (const [mode, value] of [
      ['on', 'lower_first'],
      ['off', 'off'],
    ] as const) {
      const lines = [`session_priority: ${value}`, 'workers:', `  - ${workerEntry(1, engine)}`];
      // The clients' own priorities are forwarded (from 0 up: none ahead of 0) where their class allows it.
      const top = [
        'admin: { enabled: true }',
        'preprocess: { threads: 0 }',
        'tenants: { classes: [{ name: default, engine_priority: { min: 0 } }] }',
      ];
      gateways[mode] = await serveInSuite(suite, suite.write(`${mode}.yaml`, serveConfig(MODEL, lines, top)));
    }
    // Session starts held at most 2, timeouts at most 60 s.
    const bounded = serveConfig(
      MODEL,
      ['session_priority: lower_first', 'workers:', `  - ${workerEntry(1, engine)}`],
      [
        'admin: { enabled: true }',
        'preprocess: { threads: 0 }',
        'limits: { max_sessions: 2, max_session_timeout_s: 60 }',
      ],
    );
    gateways.bounded = await serveInSuite(suite, suite.write('bounded.yaml', bounded));
  }, 60_000);

  afterAll(async () => {
    await suite?.stop();
  });

  /** Sends the four requests through `gateway`; resolves to the order in which the last three were answered. */
  async function answerOrder(gateway: string, tag: string): Promise<string[]> {
    const text = (label: string): string => `${label} ${tag} asks something`;
    const chat = (label: string, extra: Record<string, unknown> = {}): Record<string, unknown> => ({
      model: MODEL,
      messages: [{ role: 'user', content: text(label) }],
      max_tokens: 16,
      ...extra,
    });
    // The older session's first turn.
    const first = await fetch(`${gateway}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-session-id': `old-${tag}` },
      body: JSON.stringify(chat('old')),
    });
    expect(first.status).toBe(200);
    await first.text();
    // A long stream takes the engine's one seat (~25 s of decode); the three requests queue behind it, in this order.
    return engineAnswerOrder(engineUrl, gateway, { body: chat('holder') }, [
      { label: 'new', headers: { 'x-session-id': `new-${tag}` }, body: chat('new') },
      // The older session's next turn comes through the Responses API, which carries a priority too.
      {
        label: 'old',
        path: '/v1/responses',
        headers: { 'x-session-id': `old-${tag}` },
        body: { model: MODEL, input: text('old'), max_output_tokens: 16 },
      },
      { label: 'client', body: chat('client', { priority: 0 }) },
    ]);
  }

  it('the startup line says which models send session priority', () => {
    const [, on, off] = suite.procs;
    expect(on!.output()).toMatch(/"sessionPriority":"lower_first"/);
    expect(off!.output()).not.toMatch(/sessionPriority/);
  });

  it("the engine serves a client's own priority first, then the older session's turn, then the new session's", async () => {
    expect(await answerOrder(gateways.on, 'on')).toEqual(['client', 'old', 'new']);
  });

  it('with session_priority off the engine serves them as they came', async () => {
    expect(await answerOrder(gateways.off, 'off')).toEqual(['new', 'old', 'client']);
  });

  it('counts and logs the session starts it drops at limits.max_sessions and the timeouts it clamps', async () => {
    const turn = async (session: string, nvext?: Record<string, unknown>) => {
      const r = await fetch(`${gateways.bounded}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-session-id': session },
        body: JSON.stringify({
          model: MODEL,
          messages: [{ role: 'user', content: `${session} asks` }],
          max_tokens: 2,
          ...(nvext !== undefined ? { nvext } : {}),
        }),
      });
      expect(r.status).toBe(200);
      await r.text();
    };
    for (const s of ['a', 'b', 'c', 'd']) await turn(s); // c drops a, d drops b
    await turn('c', { session_control: { session_id: 'c', timeout: 86_400 } });
    const metrics = await (await fetch(`${gateways.bounded}/metrics`)).text();
    expect(metrics).toContain(`kvgate_router_session_priority_limits_total{model="${MODEL}",limit="capacity"} 2`);
    expect(metrics).toContain(`kvgate_router_session_priority_limits_total{model="${MODEL}",limit="timeout"} 1`);
    const log = suite.procs[3]!.output();
    expect(log).toMatch(/session starts at capacity: the least recently seen was dropped/);
    expect(log).toMatch(/"maxSessions":2/);
    expect(log).toMatch(/asked for a timeout above the maximum: its start is held for the maximum/);
  });
});
