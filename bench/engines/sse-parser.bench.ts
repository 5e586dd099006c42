/**
 * SSE parsing throughput on a vLLM-style chat stream (2,000 chunk events of
 * about 230 bytes, some non-ASCII text, then [DONE]), against a naive parser
 * measured in the same run: decode each chunk to a string (streaming
 * TextDecoder), append to a buffer, `split('\n\n')`, `split('\n')` and slice
 * the `data: ` lines. Two chunkings: one event per network read (how vLLM
 * writes) and seeded random 1 B - 8 KiB reads that split events, lines and
 * UTF-8 sequences anywhere. A third row adds the `JSON.parse` per event that
 * EngineEventStream does, to show what parsing costs next to JSON.
 * Outputs are checked equal before timing. Run: npm run bench -- sse
 */
import { SseParser } from '../../src/engines/index.js';
import { seededRng as rng } from '../../src/common/index.js';
import { ratio, timeAll, type BenchSection } from '../util.js';

export const title = 'SSE parsing: 2,000-event chat stream (~450 KB), kvgate SseParser vs naive split parser';

function makeStream(events: number): { bytes: Buffer; perEvent: Buffer[] } {
  const words = [' the', ' cache', ' router', ' é', ' 日本', ' token', ' prefix', ' ✓', ' block', ' worker'];
  const perEvent: Buffer[] = [];
  for (let i = 0; i < events; i++) {
    const chunk = {
      id: 'chatcmpl-8f1c2d3e4b5a69788796a5b4c3d2e1f0',
      object: 'chat.completion.chunk',
      created: 1767225600,
      model: 'Qwen/Qwen3-8B',
      choices: [{ index: 0, delta: { content: words[i % words.length] }, logprobs: null, finish_reason: null }],
    };
    perEvent.push(Buffer.from(`data: ${JSON.stringify(chunk)}\n\n`));
  }
  perEvent.push(Buffer.from('data: [DONE]\n\n'));
  return { bytes: Buffer.concat(perEvent), perEvent };
}

function randomChunks(bytes: Buffer, seed: number): Buffer[] {
  const next = rng(seed);
  const out: Buffer[] = [];
  for (let pos = 0; pos < bytes.length;) {
    const n = 1 + Math.floor(next() * 8192);
    out.push(bytes.subarray(pos, pos + n));
    pos += n;
  }
  return out;
}

function kvgate(chunks: Buffer[]): string[] {
  const out: string[] = [];
  const parser = new SseParser((_raw, data) => out.push(data));
  for (const c of chunks) parser.push(c);
  parser.end();
  return out;
}

function kvgateWithJson(chunks: Buffer[]): number {
  let n = 0;
  const parser = new SseParser((_raw, data) => {
    if (data !== '[DONE]') n += (JSON.parse(data) as { choices: unknown[] }).choices.length;
  });
  for (const c of chunks) parser.push(c);
  parser.end();
  return n;
}

function naive(chunks: Buffer[]): string[] {
  const out: string[] = [];
  const decoder = new TextDecoder();
  let buffer = '';
  for (const c of chunks) {
    buffer += decoder.decode(c, { stream: true });
    const parts = buffer.split('\n\n');
    buffer = parts.pop() ?? '';
    for (const part of parts) {
      const data: string[] = [];
      for (const line of part.split('\n')) if (line.startsWith('data: ')) data.push(line.slice(6));
      if (data.length > 0) out.push(data.join('\n'));
    }
  }
  return out;
}

export async function run(): Promise<BenchSection> {
  const { bytes, perEvent } = makeStream(2000);
  const random = randomChunks(bytes, 7);
  const mb = bytes.length / 1e6;

  // Correctness before timing: both parsers see the same events under both chunkings.
  const expected = naive([bytes]);
  for (const [name, got] of [
    ['kvgate per-event', kvgate(perEvent)],
    ['kvgate random', kvgate(random)],
    ['naive random', naive(random)],
  ] as const) {
    if (got.length !== expected.length || got.some((d, i) => d !== expected[i]))
      throw new Error(`${name}: events differ`);
  }

  const rows = await timeAll({
    'kvgate SseParser, one event per read': () => kvgate(perEvent),
    'naive split parser, one event per read': () => naive(perEvent),
    'kvgate SseParser, random 1 B-8 KiB reads': () => kvgate(random),
    'naive split parser, random 1 B-8 KiB reads': () => naive(random),
    'kvgate SseParser + JSON.parse per event': () => kvgateWithJson(perEvent),
  });
  const mbps = (us: number): string => `${(mb / (us / 1e6)).toFixed(0)} MB/s`;
  const [kPer, nPer, kRand, nRand, kJson] = rows as [
    (typeof rows)[0],
    (typeof rows)[0],
    (typeof rows)[0],
    (typeof rows)[0],
    (typeof rows)[0],
  ];
  kPer.note = `${mbps(kPer.p50Us)}, ${ratio(nPer.p50Us, kPer.p50Us)} the naive throughput`;
  nPer.note = mbps(nPer.p50Us);
  kRand.note = `${mbps(kRand.p50Us)}, ${ratio(nRand.p50Us, kRand.p50Us)} the naive throughput`;
  nRand.note = mbps(nRand.p50Us);
  kJson.note = `${mbps(kJson.p50Us)}; JSON.parse is ${((1 - kPer.p50Us / kJson.p50Us) * 100).toFixed(0)}% of the time`;
  const worst = Math.min(nPer.p50Us / kPer.p50Us, nRand.p50Us / kRand.p50Us);
  return {
    title,
    rows,
    notes: [
      `stream size ${bytes.length.toLocaleString('en-US')} bytes, ${perEvent.length} events, ${random.length} random reads; throughput from the median`,
      `target: at least the naive parser's throughput in both chunkings while also keeping raw bytes as zero-copy views: ${worst.toFixed(2)}x (${worst >= 1 ? 'met' : 'missed'})`,
    ],
  };
}
