/**
 * LoRA adapters as routing targets, and the served model name, over real
 * processes: `kvgate serve` with a config file in front of `kvgate mocker`
 * engines (HTTP + ZMQ KV events). Two engines serve the adapter
 * `sql-adapter` (their /v1/models lists it under the base model), two do not.
 *
 * issue 12 item 7 (and must-show 3): the adapter is listed by kvgate with its
 * base model as parent, requests for it (as `model` or `nvext.lora_name`) go
 * only to adapter-serving workers, are hashed in the adapter's namespace as the
 * engines' KV events are, reach the engine with the adapter as `model`, and the
 * third identical request's engine-reported cached tokens equal the predicted overlap.
 * issue 12 item 8: a model whose engine serves another name is not routed to,
 * loudly (a warning naming both names, a metric); `served_model_name` fixes it.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startCli, startMockerCli, type CliProcess, type MockerLine } from '../../helpers/cli-process.js';
import { until } from '../../helpers/until.js';

const BASE = 'base-model';
const ADAPTER = 'sql-adapter';
const HF_NAME = 'meta-llama/Llama-3.1-8B-Instruct';
const MESSAGES = [
  {
    role: 'system',
    content:
      'You translate questions about a shop database into SQL. Tables: orders(id, customer_id, total, created_at), customers(id, name, country).',
  },
  {
    role: 'user',
    content: 'Which ten customers from Norway spent the most in 2024, and how much did each of them spend in total?',
  },
];

interface Answer {
  status: number;
  worker: string | null;
  json: Record<string, any>;
}

describe('LoRA adapters and served model names through kvgate serve', () => {
  const procs: CliProcess[] = [];
  let dir: string;
  let url: string;
  let gateway: CliProcess;

  beforeAll(async () => {
    const common = ['--tokenizer', 'demo', '--speedup', '10'];
    const withAdapter = await startMockerCli(['--model', BASE, '--lora', ADAPTER, ...common], 2);
    const without = await startMockerCli(['--model', BASE, ...common], 2);
    const hf = await startMockerCli(['--model', HF_NAME, '--no-kv-events', ...common], 2);
    procs.push(withAdapter.proc, without.proc, hf.proc);
    const worker = (e: MockerLine, id: number): string =>
      `      - { id: ${id}, url: "${e.url}", kv_events: "${e.kv_events[0]}" }`;
    dir = mkdtempSync(join(tmpdir(), 'kvgate-lora-'));
    const file = join(dir, 'kvgate.yaml');
    writeFileSync(
      file,
      [
        'listen: { port: 0 }',
        'preprocess: { threads: 0 }',
        'models:',
        `  - name: ${BASE}`,
        '    tokenizer: demo',
        '    workers:',
        ...[...withAdapter.engines, ...without.engines].map((e, i) => worker(e, i + 1)),
        '  - name: llama',
        '    tokenizer: demo',
        '    router_mode: round-robin',
        `    workers: [{ id: 5, url: "${hf.engines[0]!.url}" }]`,
        '  - name: llama-fixed',
        `    served_model_name: ${HF_NAME}`,
        '    tokenizer: demo',
        '    router_mode: round-robin',
        `    workers: [{ id: 6, url: "${hf.engines[1]!.url}" }]`,
        '',
      ].join('\n'),
    );
    gateway = startCli(['serve', '-c', file]);
    procs.push(gateway);
    url = (await gateway.waitFor(/"listen":"(http:\/\/[^"]+)"/, 'the gateway listening'))[1]!;
  }, 60_000);

  afterAll(async () => {
    await Promise.allSettled(procs.map((p) => p.stop()));
    if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
  });

  async function chat(body: Record<string, unknown>): Promise<Answer> {
    const res = await fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ messages: MESSAGES, max_tokens: 4, ...body }),
    });
    return {
      status: res.status,
      worker: res.headers.get('x-kvgate-worker'),
      json: (await res.json()) as Record<string, any>,
    };
  }

  async function route(body: Record<string, unknown>): Promise<{ worker: number; overlapBlocks: number }> {
    const res = await fetch(`${url}/v1/route`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ messages: MESSAGES, ...body }),
    });
    expect(res.status).toBe(200);
    const j = (await res.json()) as { worker: { worker_id: number }; overlap_blocks: number };
    return { worker: j.worker.worker_id, overlapBlocks: j.overlap_blocks };
  }

  async function metrics(): Promise<string> {
    return (await fetch(`${url}/metrics`)).text();
  }

  // issue 12 item 7
  it("lists the adapter under its base model, learned from the engines' /v1/models", async () => {
    const list = (await (await fetch(`${url}/v1/models`)).json()) as { data: { id: string; parent?: string }[] };
    expect(list.data).toContainEqual(expect.objectContaining({ id: ADAPTER, parent: BASE }));
    expect(list.data.find((m) => m.id === BASE)?.parent).toBeUndefined();
    expect(((await (await fetch(`${url}/v1/models/${ADAPTER}`)).json()) as { parent: string }).parent).toBe(BASE);
  });

  // issue 12 item 7, must-show 3
  it('three identical adapter requests: one adapter-serving worker, the third with cached tokens = the predicted overlap', async () => {
    const answers: Answer[] = [];
    let predicted = 0;
    for (let i = 0; i < 3; i++) {
      if (i === 2) {
        // The second answer's blocks reach the index through the engine's KV events.
        await until(
          async () => (await route({ model: ADAPTER })).overlapBlocks > 0,
          'the adapter prompt in the index',
          10_000,
        );
        predicted = (await route({ model: ADAPTER })).overlapBlocks * 16;
      }
      const a = await chat({ model: ADAPTER });
      expect(a.status).toBe(200);
      answers.push(a);
    }
    expect(new Set(answers.map((a) => a.worker)).size).toBe(1);
    expect(['1', '2']).toContain(answers[0]!.worker);
    // The engine served the adapter: it was asked for it by name.
    for (const a of answers) expect(a.json.model).toBe(ADAPTER);
    const cached = answers[2]!.json.usage.prompt_tokens_details.cached_tokens as number;
    expect(predicted).toBeGreaterThan(0);
    expect(cached).toBe(predicted);
    // The same prompt for the base model is another namespace: nothing of it is cached anywhere.
    expect((await route({ model: BASE })).overlapBlocks).toBe(0);
    // nvext.lora_name next to the base model is the same adapter, the same worker and prefix.
    const viaNvext = await chat({ model: BASE, nvext: { lora_name: ADAPTER } });
    expect(viaNvext.worker).toBe(answers[0]!.worker);
    expect(viaNvext.json.model).toBe(ADAPTER);
    expect(viaNvext.json.usage.prompt_tokens_details.cached_tokens).toBe(predicted);
    const text = await metrics();
    expect(text).not.toMatch(
      new RegExp(
        `kvgate_router_prediction_total\\{model="${BASE}",worker_type="aggregated",outcome="(under|over)"\\} [1-9]`,
      ),
    );
    expect(text).toMatch(
      new RegExp(`kvgate_router_prediction_total\\{model="${BASE}",worker_type="aggregated",outcome="exact"\\} [4-9]`),
    );
  });

  // issue 12 item 7
  it('adapter requests never reach a worker without the adapter; unknown adapters are 404', async () => {
    for (let i = 0; i < 6; i++) {
      const r = await route({
        model: ADAPTER,
        messages: [{ role: 'user', content: `a different question number ${i} about the orders table` }],
      });
      expect([1, 2]).toContain(r.worker);
    }
    expect((await chat({ model: 'no-such-adapter' })).status).toBe(404);
    const unknown = await chat({ model: BASE, nvext: { lora_name: 'no-such-adapter' } });
    expect(unknown.status).toBe(404);
    expect(unknown.json.error.code).toBe('KVG_ERR_MODEL_NOT_FOUND');
  });

  // issue 12 item 8
  it('an engine serving another name: a warning with both names, a metric, the worker not routed to; served_model_name fixes it', async () => {
    const warning = await gateway.waitFor(/^.*"level":40.*"workerId":5.*$/m, 'the mismatch warning');
    expect(warning[0]).toContain(HF_NAME);
    expect(warning[0]).toContain('"servedModelName":"llama"');
    const text = await metrics();
    expect(text).toContain('kvgate_worker_served_model_mismatch{model="llama",worker_id="5"} 1');
    expect(text).toContain('kvgate_worker_served_model_mismatch{model="llama-fixed",worker_id="6"} 0');
    const ids = ((await (await fetch(`${url}/v1/models`)).json()) as { data: { id: string }[] }).data.map((m) => m.id);
    expect(ids).toContain('llama-fixed');
    expect(ids).not.toContain('llama');
    const refused = await chat({ model: 'llama' });
    expect(refused.status).toBe(503);
    expect(refused.json.error.code).toBe('KVG_ERR_MODEL_UNAVAILABLE');
    const served = await chat({ model: 'llama-fixed' });
    expect(served.status).toBe(200);
    expect(served.json.model).toBe(HF_NAME);
  });
});
