/**
 * A disaggregated stream that loses its decode engine mid-way (issue 14 must-show 2), with real processes:
 * one prefill mocker and two decode mockers (slowed so a 64-token answer takes seconds) behind `kvgate serve`,
 * for a vLLM-style pair (kv_transfer_params) and an SGLang-style pair (bootstrap; the mocker sends the token
 * ids real SGLang does not, configured with `return_token_ids: true`). The serving decode engine is killed
 * (-9) after 10 of 64 tokens: the request goes on through a new prefill and the other decode engine, and the
 * client's text equals the unfaulted run's, with one [DONE], usage over the whole answer, bookings back to zero.
 */
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ROOT, lineOf, MOCKER_OS_PORTS, start, stop, type Proc } from '../../helpers/process.js';
import { until } from '../../helpers/until.js';

const MAX_TOKENS = 64;
const CUT_AFTER = 10;

interface Engine {
  readonly proc: Proc;
  readonly url: string;
  readonly model: string;
  readonly bootstrapPort: number | undefined;
}

async function startEngine(engine: 'vllm' | 'sglang', mode: 'prefill' | 'decode'): Promise<Engine> {
  // Decode at ~50 ms per token: a 64-token answer takes about 3 s, time enough to cut it after 10.
  const slow = mode === 'decode' ? ['--fault-slow-factor', '7'] : [];
  const proc = start(['mocker', ...MOCKER_OS_PORTS, '--engine', engine, '--mode', mode, ...slow]);
  const line = await lineOf(proc, "the mocker's ports", (o) => typeof o.url === 'string');
  return {
    proc,
    url: String(line.url),
    model: String(line.model),
    bootstrapPort: typeof line.bootstrap_port === 'number' ? line.bootstrap_port : undefined,
  };
}

async function metric(url: string, pattern: RegExp): Promise<number | undefined> {
  const text = await (await fetch(`${url}/metrics`)).text();
  const line = text.split('\n').find((l) => pattern.test(l));
  return line === undefined ? undefined : Number(line.split(' ').pop());
}

const generated = async (e: Engine): Promise<number> => (await metric(e.url, /^vllm:generation_tokens_total\{/)) ?? 0;

/** Requests booked on any worker of the gateway, both pools. */
async function totalActive(url: string): Promise<number> {
  const text = await (await fetch(`${url}/metrics`)).text();
  return text
    .split('\n')
    .filter((l) => l.startsWith('kvgate_worker_active_requests{'))
    .reduce((sum, l) => sum + Number(l.split(' ').pop()), 0);
}

interface Streamed {
  readonly status: number;
  readonly text: string;
  readonly payloads: string[];
}

async function streamChat(gateway: string, model: string, whileRunning?: () => Promise<void>): Promise<Streamed> {
  const res = await fetch(`${gateway}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({
      model,
      messages: [{ role: 'user', content: 'tell me a long story about decode engines that die' }],
      max_tokens: MAX_TOKENS,
      stream: true,
      stream_options: { include_usage: true },
    }),
  });
  const running = whileRunning?.();
  const raw = await res.text();
  await running;
  const payloads = [...raw.matchAll(/^data: (.*)$/gm)].map((m) => m[1]!);
  const text = payloads
    .filter((p) => p.startsWith('{'))
    .map((p) => JSON.parse(p) as { choices?: { delta?: { content?: string } }[] })
    .map((c) => c.choices?.[0]?.delta?.content ?? '')
    .join('');
  return { status: res.status, text, payloads };
}

function usageOf(payloads: readonly string[]): Record<string, number> | undefined {
  const last = payloads
    .filter((p) => p.startsWith('{'))
    .map((p) => JSON.parse(p) as { usage?: Record<string, number> })
    .findLast((c) => c.usage !== undefined);
  return last?.usage;
}

describe.each(['vllm', 'sglang'] as const)('a %s-style pair whose decode engine dies mid-stream', (engine) => {
  let dir: string;
  let prefill: Engine;
  let decode: Engine[] = [];
  let gateway: Proc | undefined;
  let url: string;

  beforeAll(async () => {
    if (!existsSync(join(ROOT, 'dist/src/cli/index.js')))
      throw new Error('dist/ is missing: run `npm run build` first (npm test does)');
    dir = mkdtempSync(join(tmpdir(), `kvgate-disagg-migration-${engine}-`));
    [prefill, ...decode] = await Promise.all([
      startEngine(engine, 'prefill'),
      startEngine(engine, 'decode'),
      startEngine(engine, 'decode'),
    ]);
    const config = join(dir, 'kvgate.json');
    writeFileSync(
      config,
      JSON.stringify({
        listen: { host: '127.0.0.1', port: 0 },
        preprocess: { threads: 0 },
        log: { level: 'info' },
        models: [
          {
            name: prefill.model,
            block_size: 16,
            router_mode: 'round-robin',
            engine,
            workers: [
              {
                id: 1,
                url: prefill.url,
                role: 'prefill',
                ...(engine === 'sglang' ? { bootstrap_port: prefill.bootstrapPort } : {}),
              },
              // Real SGLang sends no token ids; the mocker does when asked, like vLLM.
              ...decode.map((e, i) => ({
                id: i + 2,
                url: e.url,
                role: 'decode',
                ...(engine === 'sglang' ? { return_token_ids: true } : {}),
              })),
            ],
          },
        ],
      }),
    );
    gateway = start(['serve', '--config', config]);
    url = String(
      (await lineOf(gateway, "the gateway's startup line", (o) => o.msg === 'kvgate gateway started')).listen,
    );
  }, 60_000);

  afterAll(async () => {
    await Promise.all([stop(gateway), stop(prefill?.proc), ...decode.map((e) => stop(e.proc))]);
    rmSync(dir, { recursive: true, force: true });
  });

  let reference: Streamed;

  it('reference: the request without a fault', async () => {
    reference = await streamChat(url, prefill.model);
    expect(reference.status).toBe(200);
    expect(reference.payloads.at(-1)).toBe('[DONE]');
    expect(usageOf(reference.payloads)?.completion_tokens).toBe(MAX_TOKENS);
  }, 30_000);

  // issue 14 must-show 2
  it('the decode engine killed (-9) after 10 of 64 tokens: the stream completes elsewhere with the same text', async () => {
    const before = await Promise.all(decode.map(generated));
    let killed: Engine | undefined;
    const out = await streamChat(url, prefill.model, async () => {
      await until(
        async () => {
          const now = await Promise.all(decode.map(generated));
          killed = decode.find((_, i) => now[i]! - before[i]! >= CUT_AFTER);
          return killed !== undefined;
        },
        `${CUT_AFTER} tokens on a decode engine`,
        20_000,
      );
      killed!.proc.child.kill('SIGKILL');
    });
    expect(out.status).toBe(200);
    expect(killed).toBeDefined();
    expect(out.text).toBe(reference.text);
    expect(out.payloads.filter((p) => p === '[DONE]')).toHaveLength(1);
    expect(out.payloads.at(-1)).toBe('[DONE]');
    expect(out.payloads.some((p) => p.includes('"error"') || p.includes('token_ids'))).toBe(false);
    const usage = usageOf(out.payloads)!;
    const refUsage = usageOf(reference.payloads)!;
    expect(usage.prompt_tokens).toBe(refUsage.prompt_tokens);
    expect(usage.completion_tokens).toBe(MAX_TOKENS);
    expect(usage.total_tokens).toBe(refUsage.total_tokens);
    await until(async () => (await totalActive(url)) === 0, 'every booking (prefill and decode) to be freed');
    expect(
      await metric(url, /^kvgate_router_migrations_total\{[^}]*worker_type="decode"[^}]*outcome="succeeded"/),
    ).toBe(1);
    await lineOf(
      gateway!,
      'the migration log line',
      (o) => o.msg === 'stream migrated to another worker and completed',
    );
  }, 60_000);
});
