/**
 * A Messages conversation that fits the model's context but leaves less room than its `max_tokens`, read by
 * Anthropic's own client through `kvgate serve` in front of a `kvgate mocker` engine (real processes, real sockets):
 * the engine refuses it, and on `/v1/messages` the error's message starts in Anthropic's words, `input length and
 * \`max_tokens\` exceed context limit: A + B > C, ...`, with the engine's numbers, which coding agents parse to retry
 * with a smaller max_tokens (Claude Code does); the engine's code stays in `error.code`. The OpenAI route keeps the
 * engine's words.
 *
 * Before the fix the message was the engine's own ("You passed A input tokens and requested B output tokens. ..."),
 * which such a client does not recognise, so it gave up instead of retrying.
 */
import Anthropic from '@anthropic-ai/sdk';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServeCli } from '../../helpers/cli-process.js';
import { postChat, serveConfig, startMockerSuite, workerEntry, type MockerSuite } from '../../helpers/serve-suite.js';

const MODEL = 'mock-model';
const ENGINE_CONTEXT = 2048;
const MAX_TOKENS = 1500;
const NO_ROOM = /^input length and `max_tokens` exceed context limit: (\d+) \+ (\d+) > (\d+), decrease input length/;

/** A conversation of about `words` tokens (one per word with the demo tokenizer). */
const conversation = (words: number): Anthropic.MessageParam[] => [{ role: 'user', content: 'word '.repeat(words) }];

describe("a Messages prompt that leaves no room for max_tokens, in Anthropic's words", () => {
  let suite: MockerSuite;
  let url: string;
  let anthropic: Anthropic;

  beforeAll(async () => {
    suite = await startMockerSuite(
      'agent-no-room',
      ['--speedup', '100', '--tokenizer', 'demo', '--max-model-len', String(ENGINE_CONTEXT)],
      1,
    );
    const lines = ['workers:', `  - ${workerEntry(1, suite.engines[0]!)}`];
    const served = await startServeCli(suite.write('serve.yaml', serveConfig(MODEL, lines)));
    suite.procs.push(served.proc);
    url = served.url;
    anthropic = new Anthropic({ baseURL: url, apiKey: 'unused', maxRetries: 0 });
  });

  afterAll(async () => {
    await suite?.stop();
  });

  it("each way Claude Code asks (streamed, and not): the engine's numbers, the engine's refusal code", async () => {
    const params = { model: MODEL, max_tokens: MAX_TOKENS, messages: conversation(1000) };
    for (const ask of [
      () => anthropic.messages.create(params),
      () => anthropic.messages.stream(params).finalMessage(),
    ]) {
      const e = await ask().catch((x: unknown) => x);
      expect(e).toBeInstanceOf(Anthropic.BadRequestError);
      const refused = e as InstanceType<typeof Anthropic.BadRequestError>;
      expect(refused.status).toBe(400);
      expect(refused.error).toMatchObject({
        type: 'error',
        error: { type: 'invalid_request_error', code: 'KVG_ERR_ENGINE_REJECTED' },
      });
      const { message } = (refused.error as { error: { message: string } }).error;
      expect(message).toMatch(NO_ROOM);
      const [, input, maxTokens, context] = NO_ROOM.exec(message)!.map(Number);
      expect(input).toBeGreaterThan(1000);
      expect(input).toBeLessThan(ENGINE_CONTEXT);
      expect(maxTokens).toBe(MAX_TOKENS);
      expect(context).toBe(ENGINE_CONTEXT);
      // What a coding agent does with the numbers: the same conversation with the room left is answered.
      const retried = await anthropic.messages.create({ ...params, max_tokens: context! - input! });
      expect(retried.content.length).toBeGreaterThan(0);
    }
  });

  it("the OpenAI route passes the engine's words on unchanged", async () => {
    const res = await postChat(url, {
      model: MODEL,
      max_tokens: MAX_TOKENS,
      messages: [{ role: 'user', content: 'word '.repeat(1000) }],
    });
    expect(res.status).toBe(400);
    const body = (await res.json()) as { error: { message: string; code: string } };
    expect(body.error.code).toBe('KVG_ERR_ENGINE_REJECTED');
    expect(body.error.message).toMatch(/^You passed \d+ input tokens and requested 1500 output tokens\./);
  });
});
