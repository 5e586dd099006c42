/**
 * A Messages conversation over the model's limit, read by Anthropic's own client through `kvgate serve` in front of a
 * `kvgate mocker` engine (real processes, real sockets): the error's message starts in Anthropic's words, `prompt is
 * too long: N tokens > M maximum`, which coding agents match to offer compaction (Claude Code does), and kvgate's
 * code stays in `error.code`. Both places the limit is met: kvgate's own `max_prompt_tokens` (4,096 here), and the
 * engine's context length (2,048) for a prompt between the two, refused by the engine and passed on.
 *
 * Before the fix the message was kvgate's or the engine's own ("the prompt has 6011 tokens; the limit ...", "This
 * model's maximum context length is 2048 tokens. ..."), which such a client does not recognise.
 *
 * The same through a mocker imitating SGLang, whose refusal is in SGLang's words and flat error body ("The input (N
 * tokens) is longer than the model's context length (M tokens)."): before the mocker answered so, that mode answered
 * in vLLM's words and kvgate's reading of SGLang's refusal was never exercised end to end.
 */
import Anthropic from '@anthropic-ai/sdk';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServeCli } from '../../helpers/cli-process.js';
import { serveConfig, startMockerSuite, workerEntry, type MockerSuite } from '../../helpers/serve-suite.js';

const MODEL = 'mock-model';
const ENGINE_CONTEXT = 2048;
const MAX_PROMPT_TOKENS = 4096;
const TOO_LONG = /^prompt is too long: (\d+) tokens > (\d+) maximum/;

/** A conversation of about `words` tokens (one per word with the demo tokenizer). */
const conversation = (words: number): Anthropic.MessageParam[] => [{ role: 'user', content: 'word '.repeat(words) }];

/** The error each way Claude Code asks (streamed, and not), as Anthropic's client reads it. */
async function refusals(
  anthropic: Anthropic,
  words: number,
): Promise<InstanceType<typeof Anthropic.BadRequestError>[]> {
  const params = { model: MODEL, max_tokens: 16, messages: conversation(words) };
  const out: InstanceType<typeof Anthropic.BadRequestError>[] = [];
  for (const ask of [() => anthropic.messages.create(params), () => anthropic.messages.stream(params).finalMessage()]) {
    const e = await ask().catch((x: unknown) => x);
    expect(e).toBeInstanceOf(Anthropic.BadRequestError);
    out.push(e as InstanceType<typeof Anthropic.BadRequestError>);
  }
  return out;
}

/** `kvgate serve` in front of one mocker engine started with `args`, the model's config `lines` before its workers. */
async function gatewayOver(name: string, args: readonly string[], lines: readonly string[]) {
  const suite = await startMockerSuite(name, ['--speedup', '100', '--tokenizer', 'demo', ...args], 1);
  const config = serveConfig(MODEL, [...lines, 'workers:', `  - ${workerEntry(1, suite.engines[0]!)}`]);
  try {
    const served = await startServeCli(suite.write('serve.yaml', config));
    suite.procs.push(served.proc);
    return { suite, anthropic: new Anthropic({ baseURL: served.url, apiKey: 'unused', maxRetries: 0 }) };
  } catch (err) {
    await suite.stop();
    throw err;
  }
}

describe("a Messages prompt over the limit, in Anthropic's words", () => {
  let suite: MockerSuite;
  let anthropic: Anthropic;

  beforeAll(async () => {
    ({ suite, anthropic } = await gatewayOver(
      'agent-too-long',
      ['--max-model-len', String(ENGINE_CONTEXT)],
      [`max_prompt_tokens: ${MAX_PROMPT_TOKENS}`],
    ));
  });

  afterAll(async () => {
    await suite?.stop();
  });

  it("kvgate's max_prompt_tokens: the prompt's tokens as kvgate counted them, the limit, kvgate's code", async () => {
    for (const e of await refusals(anthropic, 6000)) {
      expect(e.status).toBe(400);
      expect(e.error).toMatchObject({
        type: 'error',
        error: { type: 'invalid_request_error', code: 'KVG_ERR_PROMPT_TOO_LONG' },
      });
      const [, n, m] = TOO_LONG.exec((e.error as { error: { message: string } }).error.message)!;
      expect(Number(n)).toBeGreaterThan(MAX_PROMPT_TOKENS);
      expect(Number(m)).toBe(MAX_PROMPT_TOKENS);
    }
  });

  it("the engine's context length: the engine's numbers, the engine's refusal code", async () => {
    for (const e of await refusals(anthropic, 3000)) {
      expect(e.status).toBe(400);
      expect(e.error).toMatchObject({
        type: 'error',
        error: { type: 'invalid_request_error', code: 'KVG_ERR_ENGINE_REJECTED' },
      });
      const [, n, m] = TOO_LONG.exec((e.error as { error: { message: string } }).error.message)!;
      expect(Number(n)).toBeGreaterThan(3000);
      expect(Number(n)).toBeLessThan(MAX_PROMPT_TOKENS);
      expect(Number(m)).toBe(ENGINE_CONTEXT);
    }
  });

  it('a prompt within both limits is answered', async () => {
    const answer = await anthropic.messages.create({ model: MODEL, max_tokens: 4, messages: conversation(100) });
    expect(answer.content.length).toBeGreaterThan(0);
  });
});

describe("a Messages prompt over an SGLang engine's context, in Anthropic's words", () => {
  let suite: MockerSuite;
  let anthropic: Anthropic;

  beforeAll(async () => {
    ({ suite, anthropic } = await gatewayOver(
      'agent-too-long-sglang',
      ['--engine', 'sglang', '--max-model-len', String(ENGINE_CONTEXT)],
      ['engine: sglang'],
    ));
  });

  afterAll(async () => {
    await suite?.stop();
  });

  it("the engine's numbers read from SGLang's words, which follow them", async () => {
    for (const e of await refusals(anthropic, 3000)) {
      expect(e.status).toBe(400);
      expect(e.error).toMatchObject({
        type: 'error',
        error: { type: 'invalid_request_error', code: 'KVG_ERR_ENGINE_REJECTED' },
      });
      const message = (e.error as { error: { message: string } }).error.message;
      const [, n, m] = TOO_LONG.exec(message)!;
      expect(Number(n)).toBeGreaterThan(3000);
      expect(Number(m)).toBe(ENGINE_CONTEXT);
      expect(message).toContain(
        `(The input (${n} tokens) is longer than the model's context length (${ENGINE_CONTEXT} tokens).)`,
      );
    }
  });
});
