/**
 * What a large agent body's tools cost its preprocessing task (prompt-task.ts) for their numbers' Python text (common's
 * `pythonToolsJson`): a Chat Completions and a Messages body of about 0.8 MB, 200 tools, each timed as a preprocessing
 * thread runs it, the body's member scan (body-task.ts) then its task, from a fresh view of the same bytes each time,
 * as each request brings its own. "whole": every number in the tools is an integer literal (`"minimum": 0`), the
 * common case; "1.0": one tool's `"maximum": 1.0`, whose text the template must write as Python does. Every turn of
 * an agent resends the same tools, so the rows time a tools list seen before.
 *
 * With `KVG_BENCH_BASE` naming other built checkouts (comma-separated: say the commit before the tools' numbers were
 * read, and the one before this memo), their tasks are timed on the same bodies in the same run.
 *
 * Run: [KVG_BENCH_BASE=<built checkout>,...] node --expose-gc dist/bench/run.js frontend/tool-numbers
 */
import { basename, resolve } from 'node:path';
import { jsonByteMembers } from '../../src/common/index.js';
import { promptTask, type TaskInputs } from '../../src/frontend/prompt-task.js';
import type { EndpointKind } from '../../src/frontend/router-port.js';
import { timeAll, type BenchRow, type BenchSection } from '../util.js';

export const title = "A large agent body's tools: their numbers as Python writes them, per preprocessing task";

interface Tree {
  readonly name: string;
  readonly promptTask: (inp: TaskInputs) => unknown;
  readonly jsonByteMembers: (bytes: Uint8Array) => unknown;
}

/** A tool's JSON schema of 12 parameters: strings, and integers with whole-number bounds. */
function schema(i: number): Record<string, unknown> {
  const properties: Record<string, unknown> = {};
  for (let p = 0; p < 12; p++) {
    const description = `Parameter ${p} of tool ${i}: what it selects, its units and its default. `.repeat(3);
    properties[`param_${p}`] =
      p % 3 === 0 ? { type: 'integer', description, minimum: 0, maximum: 100 + p } : { type: 'string', description };
  }
  return { type: 'object', properties, required: ['param_0'], maxProperties: 12 };
}

/** The body's text for `endpoint`, with one whole bound written `1.0` where `float`. */
function bodyText(endpoint: 'chat' | 'messages', float: boolean): string {
  const tools = Array.from({ length: 200 }, (_, i) => {
    const description = `Tool ${i} reads, edits or runs something in the agent's workspace. `.repeat(8);
    return endpoint === 'chat'
      ? { type: 'function', function: { name: `tool_${i}`, description, parameters: schema(i) } }
      : { name: `tool_${i}`, description, input_schema: schema(i) };
  });
  const messages = [{ role: 'user', content: 'Fix the failing test in src/router.ts.' }];
  const text = JSON.stringify({ model: 'demo', max_tokens: 256, messages, tools });
  return float ? text.replace('"maximum":100', '"maximum":1.0') : text;
}

async function trees(): Promise<Tree[]> {
  const out: Tree[] = [{ name: 'this tree', promptTask, jsonByteMembers }];
  for (const dir of (process.env.KVG_BENCH_BASE ?? '').split(',').filter((d) => d !== '')) {
    const task = (await import(resolve(dir, 'dist/src/frontend/prompt-task.js'))) as Pick<Tree, 'promptTask'>;
    const json = (await import(resolve(dir, 'dist/src/common/index.js'))) as Pick<Tree, 'jsonByteMembers'>;
    out.push({ name: basename(resolve(dir)), promptTask: task.promptTask, jsonByteMembers: json.jsonByteMembers });
  }
  return out;
}

export async function run(): Promise<BenchSection> {
  const fns: Record<string, () => unknown> = {};
  const sizes: string[] = [];
  const all = await trees();
  for (const endpoint of ['chat', 'messages'] as const) {
    for (const float of [false, true]) {
      const text = bodyText(endpoint, float);
      const bytes = Buffer.from(text);
      const body = JSON.parse(text) as Record<string, unknown>;
      const kind: EndpointKind = endpoint;
      if (!float) sizes.push(`${endpoint} ${bytes.length.toLocaleString('en-US')} bytes`);
      for (const tree of all) {
        fns[`${tree.name}: ${endpoint}, ${float ? '1.0' : 'whole'}`] = () => {
          // A new view per request: what is known of one request's bytes is not known of the next one's.
          const source = new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength);
          tree.jsonByteMembers(source);
          const inp = { endpoint: kind, body, model: 'demo', maxPromptTokens: 1 << 20, source };
          return tree.promptTask({ ...inp, tokenData: undefined, loraName: undefined });
        };
      }
    }
  }
  const rows: BenchRow[] = await timeAll(fns, { time: 1500, warmupTime: 500 });
  const notes = [`Bodies: ${sizes.join(', ')}; 200 tools each.`];
  if (all.length === 1) notes.push('Set KVG_BENCH_BASE to built checkouts to time them in the same run.');
  return { title, rows, notes };
}
