/**
 * Streams that survive their engine (issue 14 item 1, must-show 1 and 3), with
 * real processes: three `kvgate mocker` engines (slowed so a 64-token answer
 * takes seconds) behind `kvgate serve` in round-robin mode. An engine killed
 * with SIGKILL (or crashed through /admin/crash) after 10 of 64 tokens: the
 * request completes on another engine and the client's text equals the same
 * request's text without the fault; usage covers the whole answer; the dead
 * engine's booking is freed. A guided-decoding request is not migrated and gets
 * a clean error event; `--migration-limit 0` turns migration off. An engine's
 * error event with code 500 mid-stream is migrated like a death.
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
}

async function startEngine(extra: readonly string[] = []): Promise<Engine> {
  // ~50 ms per token: a 64-token answer takes about 3 s, time enough to cut it after 10.
  const proc = start(['mocker', ...MOCKER_OS_PORTS, '--fault-slow-factor', '7', ...extra]);
  const line = await lineOf(proc, "the mocker's ports", (o) => typeof o.url === 'string');
  return { proc, url: String(line.url), model: String(line.model) };
}

async function generated(e: Engine): Promise<number> {
  const text = await (await fetch(`${e.url}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith('vllm:generation_tokens_total{'));
  return Number(line?.split(' ').pop() ?? 0);
}

async function metric(url: string, pattern: RegExp): Promise<number | undefined> {
  const text = await (await fetch(`${url}/metrics`)).text();
  const line = text.split('\n').find((l) => pattern.test(l));
  return line === undefined ? undefined : Number(line.split(' ').pop());
}

/** Requests booked on any worker of the gateway. */
async function totalActive(url: string): Promise<number> {
  const text = await (await fetch(`${url}/metrics`)).text();
  return text
    .split('\n')
    .filter((l) => l.startsWith('kvgate_worker_active_requests{'))
    .reduce((sum, l) => sum + Number(l.split(' ').pop()), 0);
}

function chatBody(model: string, stream: boolean, extra: Record<string, unknown> = {}): string {
  return JSON.stringify({
    model,
    messages: [{ role: 'user', content: 'tell me a long story about engines that die' }],
    max_tokens: MAX_TOKENS,
    stream,
    ...(stream ? { stream_options: { include_usage: true } } : {}),
    ...extra,
  });
}

interface Streamed {
  readonly status: number;
  readonly worker: number;
  readonly text: string;
  readonly payloads: string[];
}

/** A streamed chat; `whileRunning` is called once the response headers are in, with the serving worker's id. */
async function streamChat(
  gateway: string,
  model: string,
  whileRunning?: (worker: number) => Promise<void>,
  extra: Record<string, unknown> = {},
  headers: Record<string, string> = {},
): Promise<Streamed> {
  const res = await fetch(`${gateway}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: chatBody(model, true, extra),
  });
  const worker = Number(res.headers.get('x-kvgate-worker')?.split(':')[0]);
  const running = whileRunning?.(worker);
  const raw = await res.text();
  await running;
  const payloads = [...raw.matchAll(/^data: (.*)$/gm)].map((m) => m[1]!);
  const text = payloads
    .filter((p) => p.startsWith('{'))
    .map((p) => JSON.parse(p) as { choices?: { delta?: { content?: string } }[] })
    .map((c) => c.choices?.[0]?.delta?.content ?? '')
    .join('');
  return { status: res.status, worker, text, payloads };
}

/** A round-robin gateway's config over `engines` (written into `dir`), with `extra` model settings. */
function roundRobinConfig(dir: string, engines: readonly Engine[], extra: Record<string, unknown> = {}): string {
  const config = join(dir, 'kvgate.json');
  writeFileSync(
    config,
    JSON.stringify({
      listen: { host: '127.0.0.1', port: 0 },
      preprocess: { threads: 0 },
      log: { level: 'info' },
      models: [
        {
          name: engines[0]!.model,
          block_size: 16,
          router_mode: 'round-robin',
          ...extra,
          workers: engines.map((e, i) => ({ id: i + 1, url: e.url })),
        },
      ],
    }),
  );
  return config;
}

async function serve(args: readonly string[]): Promise<{ proc: Proc; url: string }> {
  const proc = start(['serve', ...args]);
  const line = await lineOf(proc, "the gateway's startup line", (o) => o.msg === 'kvgate gateway started');
  return { proc, url: String(line.listen) };
}

function usageOf(payloads: readonly string[]): Record<string, number> | undefined {
  const last = payloads
    .filter((p) => p.startsWith('{'))
    .map((p) => JSON.parse(p) as { usage?: Record<string, number> })
    .findLast((c) => c.usage !== undefined);
  return last?.usage;
}

describe('migration over real processes', () => {
  let dir: string;
  const engines = new Map<number, Engine>();
  let gateway: Proc | undefined;
  let url: string;
  let model: string;

  beforeAll(async () => {
    if (!existsSync(join(ROOT, 'dist/src/cli/index.js')))
      throw new Error('dist/ is missing: run `npm run build` first (npm test does)');
    dir = mkdtempSync(join(tmpdir(), 'kvgate-migration-'));
    const started = await Promise.all([startEngine(), startEngine(), startEngine()]);
    started.forEach((e, i) => engines.set(i + 1, e));
    model = started[0]!.model;
    ({ proc: gateway, url } = await serve(['--config', roundRobinConfig(dir, started)]));
  }, 60_000);

  afterAll(async () => {
    await Promise.all([stop(gateway), ...[...engines.values()].map((e) => stop(e.proc))]);
    rmSync(dir, { recursive: true, force: true });
  });

  /** Waits until `e` generated `n` more tokens than `before`. */
  async function afterTokens(e: Engine, before: number, n: number): Promise<void> {
    await until(async () => (await generated(e)) - before >= n, `${n} tokens on ${e.url}`, 20_000);
  }

  const active = (id: number): RegExp =>
    new RegExp(
      `^kvgate_worker_active_requests\\{model="[^"]+",worker_id="${id}",dp_rank="0",worker_type="aggregated"\\}`,
    );

  let reference: Streamed;

  it('reference: the request without a fault', async () => {
    reference = await streamChat(url, model);
    expect(reference.status).toBe(200);
    expect(reference.payloads.at(-1)).toBe('[DONE]');
    expect(usageOf(reference.payloads)?.completion_tokens).toBe(MAX_TOKENS);
  }, 30_000);

  it('a streaming chat whose engine is killed (-9) after 10 of 64 tokens completes on another engine with the same text', async () => {
    let killed = 0;
    const out = await streamChat(url, model, async (worker) => {
      const e = engines.get(worker)!;
      const before = await generated(e);
      await afterTokens(e, before, CUT_AFTER);
      e.proc.child.kill('SIGKILL');
      killed = worker;
    });
    expect(out.status).toBe(200);
    expect(killed).toBeGreaterThan(0);
    expect(out.text).toBe(reference.text);
    expect(out.payloads.filter((p) => p === '[DONE]')).toHaveLength(1);
    expect(out.payloads.at(-1)).toBe('[DONE]');
    expect(out.payloads.some((p) => p.includes('"error"'))).toBe(false);
    // The engine fields kvgate asked for are not shown to a client that did not ask.
    expect(out.payloads.some((p) => p.includes('token_ids'))).toBe(false);
    const usage = usageOf(out.payloads)!;
    const refUsage = usageOf(reference.payloads)!;
    expect(usage.prompt_tokens).toBe(refUsage.prompt_tokens);
    expect(usage.completion_tokens).toBe(MAX_TOKENS);
    expect(usage.total_tokens).toBe(refUsage.total_tokens);
    // The dead engine leaves the pool once health probing sees it (its series goes with it); until then it reads 0.
    await until(
      async () => ((await metric(url, active(killed))) ?? 0) === 0,
      "the killed engine's booking to be freed",
    );
    expect(await totalActive(url)).toBe(0);
    expect(await metric(url, /^kvgate_router_migrations_total\{[^}]*outcome="succeeded"/)).toBe(1);
    await lineOf(
      gateway!,
      'the migration log line',
      (o) => o.msg === 'stream migrated to another worker and completed',
    );
  }, 60_000);

  it('a non-streaming chat whose engine crashes after 10 of 64 tokens: the same answer, usage over the whole answer', async () => {
    const live = [...engines.entries()].filter(
      ([, e]) => e.proc.child.exitCode === null && e.proc.child.signalCode === null,
    );
    const before = new Map(await Promise.all(live.map(async ([id, e]) => [id, await generated(e)] as const)));
    const pending = fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: chatBody(model, false),
    });
    let crashed: number | undefined;
    await until(
      async () => {
        for (const [id, e] of live) if ((await generated(e)) - before.get(id)! >= CUT_AFTER) crashed = id;
        return crashed !== undefined;
      },
      '10 tokens on one engine',
      20_000,
    );
    const crash = await fetch(`${engines.get(crashed!)!.url}/admin/crash`, { method: 'POST' });
    expect(crash.status).toBe(202);
    const res = await pending;
    const body = (await res.json()) as { choices: { message: { content: string } }[]; usage: Record<string, number> };
    expect(res.status).toBe(200);
    expect(body.choices[0]!.message.content).toBe(reference.text);
    expect(body.usage.completion_tokens).toBe(MAX_TOKENS);
    expect(body.usage.prompt_tokens).toBe(usageOf(reference.payloads)!.prompt_tokens);
    expect(JSON.stringify(body)).not.toContain('token_ids');
    await until(
      async () => ((await metric(url, active(crashed!))) ?? 0) === 0,
      "the crashed engine's booking to be freed",
    );
    expect(await totalActive(url)).toBe(0);
    expect(await metric(url, /^kvgate_router_migrations_total\{[^}]*outcome="succeeded"/)).toBe(2);
  }, 60_000);
});

describe('what is not migrated', () => {
  let dir: string;
  let engines: Engine[] = [];
  let gateway: Proc | undefined;
  let off: Proc | undefined;
  let url: string;
  let offUrl: string;
  let model: string;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'kvgate-no-migration-'));
    // Both engines stall after 10 tokens: the stream-idle timeout cuts the leg (a migratable failure).
    engines = await Promise.all([
      startEngine(['--fault-stall-after-tokens', '10']),
      startEngine(['--fault-stall-after-tokens', '10']),
    ]);
    model = engines[0]!.model;
    const config = roundRobinConfig(dir, engines, { engine_timeouts: { stream_idle_timeout_ms: 800 } });
    [{ proc: gateway, url }, { proc: off, url: offUrl }] = await Promise.all([
      serve(['--config', config]),
      serve(['--config', config, '--migration-limit', '0']),
    ]);
  }, 60_000);

  afterAll(async () => {
    await Promise.all([stop(gateway), stop(off), ...engines.map((e) => stop(e.proc))]);
    rmSync(dir, { recursive: true, force: true });
  });

  it('a guided-decoding request (response_format) is not migrated: its tokens, then a clean error event', async () => {
    const out = await streamChat(url, model, undefined, { response_format: { type: 'json_object' } });
    expect(out.status).toBe(200);
    const error = JSON.parse(out.payloads.at(-1)!) as { error: { code: string } };
    expect(error.error.code).toBe('KVG_ERR_ENGINE_STREAM_IDLE_TIMEOUT');
    expect(out.payloads).not.toContain('[DONE]');
    expect(await metric(url, /^kvgate_router_migrations_skipped_total\{[^}]*reason="not_migratable"/)).toBe(1);
    expect(await metric(url, /^kvgate_router_migrations_total\{[^}]*outcome="started"/)).toBeUndefined();
  }, 30_000);

  it('migration_limit 0 (--migration-limit 0): a plain request is not migrated either', async () => {
    const out = await streamChat(offUrl, model);
    const error = JSON.parse(out.payloads.at(-1)!) as { error: { code: string } };
    expect(error.error.code).toBe('KVG_ERR_ENGINE_STREAM_IDLE_TIMEOUT');
    expect(await metric(offUrl, /^kvgate_router_migrations_total\{[^}]*outcome="started"/)).toBeUndefined();
  }, 30_000);

  it('with migration on, the same plain request is migrated (and fails again only because every engine stalls)', async () => {
    const out = await streamChat(url, model);
    expect(JSON.parse(out.payloads.at(-1)!).error.code).toBe('KVG_ERR_ENGINE_STREAM_IDLE_TIMEOUT');
    expect(await metric(url, /^kvgate_router_migrations_total\{[^}]*outcome="started"/)).toBe(1);
    expect(await metric(url, /^kvgate_router_migrations_total\{[^}]*outcome="failed"/)).toBe(1);
  }, 30_000);
});

describe("an engine's error event mid-stream", () => {
  let dir: string;
  let engines: Engine[] = [];
  let gateway: Proc | undefined;
  let url: string;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'kvgate-error-event-'));
    // Worker 1 sends vLLM's error event (code 500, as when its engine loop dies) after 10 tokens of each stream.
    engines = await Promise.all([startEngine(['--fault-error-after-tokens', String(CUT_AFTER)]), startEngine()]);
    ({ proc: gateway, url } = await serve(['--config', roundRobinConfig(dir, engines)]));
  }, 60_000);

  afterAll(async () => {
    await Promise.all([stop(gateway), ...engines.map((e) => stop(e.proc))]);
    rmSync(dir, { recursive: true, force: true });
  });

  it('with code 500 is migrated: the stream completes on the other engine with the same text, no error event', async () => {
    const model = engines[0]!.model;
    // The reference: the same request pinned to the clean worker. Round-robin starts the next one on worker 1 (a
    // migration's continuation takes a turn too, so the cursor is read, not assumed).
    const clean = await streamChat(url, model, undefined, {}, { 'x-worker-instance-id': '2' });
    const outs: Streamed[] = [];
    while (outs.length < 2 && !outs.some((o) => o.worker === 1)) outs.push(await streamChat(url, model));
    expect(outs.at(-1)!.worker).toBe(1);
    for (const out of [clean, ...outs]) {
      expect(out.status).toBe(200);
      expect(out.payloads.some((p) => p.includes('"error"'))).toBe(false);
      expect(out.payloads.at(-1)).toBe('[DONE]');
      expect(out.text).toBe(clean.text);
      expect(usageOf(out.payloads)?.completion_tokens).toBe(MAX_TOKENS);
    }
    expect(await metric(url, /^kvgate_router_engine_error_events_total\{[^}]*kind="failed"/)).toBe(1);
    expect(await metric(url, /^kvgate_router_migrations_total\{[^}]*outcome="succeeded"/)).toBe(1);
    await lineOf(
      gateway!,
      'the migration log line',
      (o) => o.msg === 'stream migrated to another worker and completed',
    );
    expect(await totalActive(url)).toBe(0);
  }, 60_000);
});
