/**
 * `anthropic_inline_system: auto` (the default) over real processes: `kvgate serve` in front of two `kvgate mocker`
 * engines, both with the demo model's tokenizer under a chat template that refuses a system message anywhere but
 * first, as Qwen3.5's does. Each settles `auto` by probing that template as vLLM does, so both fold Claude Code's
 * system messages into the user turns: the turns are served (with `preserve` the template refused every one, a
 * 400), and the next turn goes to the worker that holds the first and reads it from the cache.
 */
import { copyFileSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { serveInSuite, startMockerSuite, workerEntry, type MockerSuite } from '../../helpers/serve-suite.js';
import { demoTokenizerFiles } from '../../../src/tokenizer/index.js';

const MODEL = 'mock-model';
const TEMPLATE =
  '{% for m in messages %}' +
  "{% if m.role == 'system' and not loop.first %}{{ raise_exception('System message must be at the beginning.') }}{% endif %}" +
  "<|im_start|>{{ m.role }}\n{{ m.content or '' }}<|im_end|>\n{% endfor %}" +
  '{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}';

let dir: string;
let suite: MockerSuite;
let url: string;

beforeAll(async () => {
  // The demo tokenizer under the refusing template: a model folder as both read one.
  dir = mkdtempSync(join(tmpdir(), 'kvgate-inline-auto-'));
  const model = join(dir, 'model');
  mkdirSync(model);
  copyFileSync(demoTokenizerFiles().tokenizerJson, join(model, 'tokenizer.json'));
  writeFileSync(
    join(model, 'tokenizer_config.json'),
    JSON.stringify({ chat_template: TEMPLATE, eos_token: '<|im_end|>' }),
  );
  suite = await startMockerSuite('inline-auto', ['--speedup', '100', '--tokenizer', model], 2);
  const config = [
    'listen: { port: 0 }',
    'preprocess: { threads: 0 }',
    'models:',
    `  - name: ${MODEL}`,
    `    tokenizer: ${model}`,
    '    workers:',
    ...suite.engines.map((e, i) => `      - ${workerEntry(i + 1, e)}`),
    '',
  ].join('\n');
  url = await serveInSuite(suite, suite.write('serve.yaml', config));
}, 60_000);

afterAll(async () => {
  await suite?.stop();
  rmSync(dir, { recursive: true, force: true });
});

async function post(messages: unknown[]) {
  const res = await fetch(`${url}/v1/messages`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL, max_tokens: 4, system: 'You are a coding agent.', messages }),
  });
  const body = (await res.json()) as {
    content?: { text?: string }[];
    usage?: { input_tokens: number; cache_read_input_tokens?: number };
    error?: { message: string };
  };
  return { status: res.status, worker: res.headers.get('x-kvgate-worker'), body };
}

describe('anthropic_inline_system: auto', () => {
  it("folds Claude Code's system messages where the template refuses them, in the gateway and the engine alike", async () => {
    const rules = `Project rules: ${'keep changes small; '.repeat(20)}`;
    const turn1 = [
      { role: 'user', content: 'Which files are in the current directory?' },
      { role: 'system', content: rules },
    ];
    const first = await post(turn1);
    expect(first.body.error?.message).toBeUndefined();
    expect(first.status).toBe(200);
    const answer = (first.body.content ?? []).map((b) => b.text ?? '').join('');
    const second = await post([
      ...turn1,
      { role: 'assistant', content: answer },
      { role: 'user', content: 'Open the first one.' },
      { role: 'system', content: 'Reminder: be terse.' },
    ]);
    expect(second.status).toBe(200);
    expect(second.worker).toBe(first.worker);
    expect(second.body.usage!.cache_read_input_tokens).toBeGreaterThanOrEqual(first.body.usage!.input_tokens - 16);
  }, 30_000);
});
