/**
 * The render of a chat template: @huggingface/jinja's interpreter against the
 * same template compiled to JavaScript (`src/tokenizer/template-compile.ts`),
 * same run, same variables, for each template the project is tested with, on
 * an agent's ~170-message conversation of about 128k tokens and on an 8k-token
 * chat. The two texts are checked equal before timing.
 *
 * The conversation alternates user and assistant messages after a system
 * prompt (the one shape every template accepts: Gemma 3 refuses any other),
 * with an assistant's reasoning in `<think>` on every fourth answer, so Qwen3's
 * reasoning rules run. `RENDER_BENCH_TIME` sets the milliseconds per case
 * (default 1000).
 * Run: node --expose-gc dist/bench/run.js tokenizer/render
 */
import { Template } from '@huggingface/jinja';
import { seededRng } from '../../src/common/index.js';
import { ChatTemplate, loadTokenizer } from '../../src/tokenizer/index.js';
import { compileTemplate } from '../../src/tokenizer/template-compile.js';
import type { Node } from '../../src/tokenizer/template-expressions.js';
import { ratio, timeAll, type BenchRow, type BenchSection } from '../util.js';
import { chatTemplates } from './templates.js';

export const title = 'Chat template render: the interpreter against the template compiled to JavaScript';

/** Words of an agent's session (code, prose, non-ASCII), about 1.35 tokens each with Qwen3's vocabulary. */
const VOCABULARY = `cache prefix worker router engine naïve 東京 größe file.ts return await const the a of to
  request token block event shard replica tool result error line column ✓ 😀 {"path": "src/x.ts"}`.split(/\s+/);

/** About `n` tokens of seeded text. */
function para(rnd: () => number, n: number): string {
  return Array.from({ length: Math.ceil(n / 1.35) }, () => VOCABULARY[Math.floor(rnd() * VOCABULARY.length)]).join(' ');
}

/** `count` messages of about `tokens` tokens in all: a system prompt, then user and assistant in turn. */
function conversation(count: number, tokens: number): { role: string; content: string }[] {
  const rnd = seededRng(count);
  const per = tokens / count;
  const messages = [{ role: 'system', content: `You are a coding agent. ${para(rnd, per)}` }];
  for (let i = 1; i < count; i++) {
    const role = i % 2 === 1 ? 'user' : 'assistant';
    const think = role === 'assistant' && i % 8 === 0 ? `<think>\n${para(rnd, 40)}\n</think>\n\n` : '';
    messages.push({ role, content: think + para(rnd, per) });
  }
  return messages;
}

export async function run(): Promise<BenchSection> {
  const time = Number(process.env.RENDER_BENCH_TIME ?? 1000);
  const sizes = [
    { label: '~128k tokens, 171 messages', messages: conversation(171, 128_000) },
    { label: '8k chat, 13 messages', messages: conversation(13, 8_000) },
  ];
  const rows: BenchRow[] = [];
  const notes: string[] = [];
  const qwen3 = loadTokenizer('demo');
  for (const [name, t] of Object.entries(chatTemplates())) {
    if (name === 'chatml') continue;
    const interpreter = new Template(t.source);
    const compiled = compileTemplate(interpreter.parsed as unknown as Node).render;
    if (compiled === undefined) {
      notes.push(`${name}: not compiled (${new ChatTemplate(t.source).interpretedBecause ?? '?'})`);
      continue;
    }
    for (const size of sizes) {
      const vars = { messages: size.messages, add_generation_prompt: true, bos_token: t.bos, eos_token: t.eos };
      const text = interpreter.render(vars);
      if (compiled(vars).join('') !== text)
        throw new Error(`${name}: the compiled render differs from the interpreter's`);
      const [a, b] = await timeAll(
        {
          [`${name}, ${size.label}: interpreter`]: () => interpreter.render(vars),
          [`${name}, ${size.label}: compiled`]: () => compiled(vars).join(''),
        },
        { time, warmupTime: Math.min(300, time) },
      );
      const tokens =
        name === 'qwen3' ? `, ${(await qwen3.encode(text, { addSpecialTokens: false })).length} tokens` : '';
      const note = `${ratio(b!.p50Us, a!.p50Us)} of the interpreter; ${text.length} chars${tokens}`;
      rows.push(a!, { ...b!, note });
    }
  }
  notes.push('Each pair from one run on the same variables; the texts are checked equal before timing.');
  return { title, rows, notes };
}
