/**
 * A preprocessing task that never ends (here a chat template that loops for
 * hours on one message's content, as a pathological template or a bug would)
 * must not hold its thread for good: past the task time bound its thread is
 * stopped and replaced, the request is answered KVG_ERR_PREPROCESS_TIMEOUT,
 * the tasks cut with it KVG_ERR_PREPROCESS_THREAD_LOST (retryable), the loss
 * is logged and counted, and the thread serves the requests after it.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterAll, describe, expect, it } from 'vitest';
import { createPreprocessor, preprocessModelSpecs } from '../../src/frontend/preprocess/preprocessor.js';
import type { PreprocessModelSpec, PreprocessTask } from '../../src/frontend/preprocess/protocol.js';
import { demoTokenizerFiles } from '../../src/tokenizer/index.js';
import { FakeRouter } from './fake-router.js';
import { largeBodyConfig, post, startPoolGateway } from './server-harness.js';

const dir = mkdtempSync(join(tmpdir(), 'kvgate-hang-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** ChatML, except that a message whose content is 'hang' costs 10^10 loop turns. */
const HANGING_TEMPLATE =
  "{% for m in messages %}{% if m.content == 'hang' %}{% for i in range(100000) %}{% for j in range(100000) %}" +
  '{% endfor %}{% endfor %}{% endif %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}' +
  '{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}';

function hangingSpecs(): PreprocessModelSpec[] {
  const chatTemplate = join(dir, 'hang.jinja');
  writeFileSync(chatTemplate, HANGING_TEMPLATE);
  const [spec] = preprocessModelSpecs(largeBodyConfig());
  return [{ ...spec!, tokenizer: { kind: 'files', files: { ...demoTokenizerFiles(), chatTemplate } } }];
}

const chat = (content: string): PreprocessTask => ({
  kind: 'chat',
  model: 'demo',
  messages: [{ role: 'user', content }],
  maxPromptTokens: 100_000,
});

const TIMEOUT_MS = 1000;

describe('a preprocessing task past the time bound', () => {
  it('fails with KVG_ERR_PREPROCESS_TIMEOUT; its thread is replaced and serves the next tasks', async () => {
    const pre = await createPreprocessor(hangingSpecs(), { threads: 1, inlineMaxChars: -1, taskTimeoutMs: TIMEOUT_MS });
    const lost: unknown[] = [];
    pre.onThreadLost = (loss, detail) => lost.push([loss, detail.task]);
    try {
      const t0 = performance.now();
      const hung = pre.run(chat('hang')).catch((e: unknown) => e);
      // Sent to the same thread while the template loops: cut with it.
      const beside = pre.run(chat('hello')).catch((e: unknown) => e);
      expect(await hung).toMatchObject({ code: 'KVG_ERR_PREPROCESS_TIMEOUT', retryable: false });
      expect(await beside).toMatchObject({ code: 'KVG_ERR_PREPROCESS_THREAD_LOST', retryable: true });
      expect(performance.now() - t0).toBeLessThan(TIMEOUT_MS + 10_000);
      const after = await pre.run(chat('hello again'));
      expect(after.promptTokens).toBeGreaterThan(0);
      expect(lost).toEqual([['timeout', 'chat']]);
    } finally {
      await pre.close();
    }
  }, 60_000);

  it('through the gateway: the client gets the code, the log and the counter the loss, others are served', async () => {
    const lines: Record<string, any>[] = [];
    const logger = pino({ level: 'info' }, { write: (line: string) => void lines.push(JSON.parse(line)) });
    const router = new FakeRouter({ model: 'demo', workerIds: [1] });
    const pre = { threads: 1, inlineMaxChars: -1, taskTimeoutMs: TIMEOUT_MS };
    const g = await startPoolGateway(largeBodyConfig(), router, pre, hangingSpecs(), logger);
    try {
      const url = `${g.url}/v1/chat/completions`;
      const hung = await post(url, { model: 'demo', messages: [{ role: 'user', content: 'hang' }] });
      expect(hung.status).toBe(500);
      expect(hung.json.error.code).toBe('KVG_ERR_PREPROCESS_TIMEOUT');
      const next = await post(url, { model: 'demo', messages: [{ role: 'user', content: 'hello' }] });
      expect(next.status).toBe(200);
      const m = await g.server.metrics.preprocessThreadsLost.get();
      expect(m.values).toEqual([expect.objectContaining({ labels: { reason: 'timeout' }, value: 1 })]);
      expect(lines.filter((l) => l.reason === 'timeout' && l.task === 'chat' && l.level === 50)).toHaveLength(1);
      expect(g.server.inflight).toBe(0);
    } finally {
      await g.close();
    }
  }, 60_000);
});
