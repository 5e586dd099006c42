/**
 * The render of an agent's tool-heavy conversation (the demo model's Qwen3 template): a system prompt, a task,
 * then `TOOL_CALLS_BENCH_CALLS` (default 150) assistant tool calls with JSON arguments of about 450 bytes, each
 * answered by a tool message. Since the template sees the messages as vLLM's chat parser hands them over, each
 * call's arguments are parsed from their JSON text and printed by the template as JSON (`tojson`), where before
 * the text was printed as it came: this bench prices that. The same conversation with the arguments as plain
 * assistant text is the baseline of the parts the change does not touch.
 *
 * With `KVG_BENCH_BASE` naming another built checkout, its tokenizer renders the same conversations in the same
 * run (its texts differ where it printed the arguments as sent).
 *
 * Run: [KVG_BENCH_BASE=<built checkout>] node --expose-gc dist/bench/run.js tokenizer/tool-calls
 */
import { resolve } from 'node:path';
import type { ChatMessage, TextTokenizer } from '../../src/tokenizer/index.js';
import { loadTokenizer } from '../../src/tokenizer/index.js';
import { ratio, timeAll, type BenchRow, type BenchSection } from '../util.js';

export const title = "An agent's tool calls through the chat template: arguments parsed and printed as JSON";

function conversations(calls: number): { tools: ChatMessage[]; plain: ChatMessage[] } {
  const tools: Record<string, unknown>[] = [
    { role: 'system', content: 'You are a coding agent. '.repeat(200) },
    { role: 'user', content: 'Fix the failing test in src/router.ts.' },
  ];
  for (let i = 0; i < calls; i++) {
    const args = JSON.stringify({
      path: `src/file${i}.ts`,
      old_string: `const limit = ${i};\n`.repeat(10),
      new_string: `const limit = ${i + 1};\n`.repeat(10),
      replace_all: i % 2 === 0,
    });
    tools.push({
      role: 'assistant',
      content: null,
      tool_calls: [{ id: `call-${i}`, type: 'function', function: { name: 'edit', arguments: args } }],
    });
    tools.push({ role: 'tool', tool_call_id: `call-${i}`, content: `Edited src/file${i}.ts. `.repeat(8) });
  }
  const plain = tools.map((m) => {
    const calls = m.tool_calls as { function: { arguments: string } }[] | undefined;
    return calls === undefined ? m : { role: 'assistant', content: calls[0]!.function.arguments };
  });
  return { tools: tools as unknown as ChatMessage[], plain: plain as unknown as ChatMessage[] };
}

async function baseTokenizer(): Promise<TextTokenizer | undefined> {
  const dir = process.env.KVG_BENCH_BASE;
  if (dir === undefined) return undefined;
  const mod = (await import(resolve(dir, 'dist/src/tokenizer/index.js'))) as { loadTokenizer: typeof loadTokenizer };
  return mod.loadTokenizer('demo');
}

export async function run(): Promise<BenchSection> {
  const calls = Number(process.env.TOOL_CALLS_BENCH_CALLS ?? 150);
  const { tools, plain } = conversations(calls);
  const here = loadTokenizer('demo');
  const base = await baseTokenizer();
  const fns: Record<string, () => unknown> = {
    [`this tree: ${calls} tool calls`]: () => here.renderChatParts(tools),
    'this tree: the same as plain text': () => here.renderChatParts(plain),
  };
  if (base !== undefined) {
    fns[`base: ${calls} tool calls`] = () => base.renderChatParts(tools);
    fns['base: the same as plain text'] = () => base.renderChatParts(plain);
  }
  const rows: BenchRow[] = await timeAll(fns, { time: 1500, warmupTime: 500 });
  const bytes = tools.reduce((n, m) => n + JSON.stringify(m).length, 0);
  const notes = [`${calls} tool calls, ${bytes.toLocaleString('en-US')} bytes of messages.`];
  if (base !== undefined) {
    rows[0]!.note = `${ratio(rows[0]!.p50Us, rows[2]!.p50Us)} the base's`;
    rows[1]!.note = `${ratio(rows[1]!.p50Us, rows[3]!.p50Us)} the base's`;
  } else notes.push('Set KVG_BENCH_BASE to a built checkout to time the base in the same run.');
  return { title, rows, notes };
}
