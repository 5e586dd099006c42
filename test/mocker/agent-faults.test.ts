/**
 * The faults that cut an answer (`stall_after_tokens`, `error_after_tokens`; `--fault-stall-after-tokens`,
 * `--fault-error-after-tokens`) apply to the agent APIs' streams as to a chat's: `/v1/messages` and
 * `/v1/responses` send that many tokens, then nothing with the connection open, or the API's own error event and
 * the end of the stream (Anthropic's `error` with its error nested, the Responses `error` with code and message at
 * the top level and the next sequence number). Real sockets against an in-process mocker.
 *
 * Before the fix both faults were ignored there: the stream ran to its last event.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { startMocker, type MockerHandle } from '../../src/mocker/index.js';
import { postJson, until } from './helpers.js';

const open: MockerHandle[] = [];
async function mocker(): Promise<MockerHandle> {
  const m = await startMocker({ speedup: 20, kvEvents: false, tokenizer: 'demo' });
  open.push(m);
  return m;
}
afterEach(async () => {
  await Promise.all(open.splice(0).map((m) => m.close()));
});

const admin = (m: MockerHandle, faults: Record<string, unknown>) => postJson(`${m.url}/admin/faults`, faults);

interface Api {
  readonly path: string;
  readonly body: Record<string, unknown>;
  /** The event that carries one token's text. */
  readonly delta: string;
  /** The stream's last event when nothing failed. */
  readonly last: string;
}

const APIS: readonly Api[] = [
  {
    path: '/v1/messages',
    body: { model: 'mock-model', max_tokens: 8, messages: [{ role: 'user', content: 'Tell a story.' }] },
    delta: 'content_block_delta',
    last: 'message_stop',
  },
  {
    path: '/v1/responses',
    body: { model: 'mock-model', max_output_tokens: 8, input: 'Tell a story.' },
    delta: 'response.output_text.delta',
    last: 'response.completed',
  },
];

/** The named events of an SSE text: each event's name and its data. */
function eventsOf(text: string): { event: string; data: Record<string, unknown> }[] {
  return text
    .split('\n\n')
    .filter((f) => f.startsWith('event: '))
    .map((f) => {
      const [head, data] = f.split('\n');
      return { event: head!.slice(7), data: JSON.parse(data!.slice(6)) as Record<string, unknown> };
    });
}

const post = (m: MockerHandle, api: Api, stream: boolean, signal?: AbortSignal): Promise<Response> =>
  fetch(`${m.url}${api.path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ ...api.body, stream }),
    signal,
  });

describe('faults that cut an answer, on the agent APIs', () => {
  it.each(APIS)(
    "error_after_tokens on $path: that many tokens, then the API's error event and the end",
    async (api) => {
      const m = await mocker();
      await admin(m, { error_after_tokens: 3, error_status: 503 });
      const events = eventsOf(await (await post(m, api, true)).text());
      expect(events.filter((e) => e.event === api.delta)).toHaveLength(3);
      expect(events.map((e) => e.event)).not.toContain(api.last);
      const error = events.at(-1)!;
      expect(error.event).toBe('error');
      if (api.path === '/v1/messages') {
        expect(error.data).toMatchObject({ type: 'error', error: { type: 'overloaded_error' } });
      } else {
        expect(error.data).toMatchObject({ type: 'error', code: '503', param: null });
        expect(error.data.sequence_number).toBe((events.at(-2)!.data.sequence_number as number) + 1);
      }
      // Unstreamed answers are not touched; null lifts the fault.
      expect((await postJson(`${m.url}${api.path}`, api.body)).status).toBe(200);
      await admin(m, { error_after_tokens: null });
      expect(eventsOf(await (await post(m, api, true)).text()).at(-1)!.event).toBe(api.last);
    },
  );

  it.each(APIS)('stall_after_tokens on $path: that many tokens, then nothing, the connection open', async (api) => {
    const m = await mocker();
    await admin(m, { stall_after_tokens: 2 });
    const ac = new AbortController();
    const reader = (await post(m, api, true, ac.signal)).body!.getReader();
    let text = '';
    await until(async () => {
      text += new TextDecoder().decode((await reader.read()).value);
      return eventsOf(text).filter((e) => e.event === api.delta).length >= 2;
    }, 'two tokens');
    // The engine finishes the request internally; the answer never ends.
    await until(
      () => m.stats().ranks[0]!.running === 0 && m.stats().ranks[0]!.generationTokens >= 8,
      'the engine to finish the request',
    );
    expect(eventsOf(text).filter((e) => e.event === api.delta)).toHaveLength(2);
    expect(eventsOf(text).map((e) => e.event)).not.toContain(api.last);
    ac.abort();
    await admin(m, { stall_after_tokens: null });
    expect((await postJson(`${m.url}${api.path}`, api.body)).status).toBe(200);
  });
});
