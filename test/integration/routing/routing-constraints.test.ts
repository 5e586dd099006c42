/**
 * Routing constraints end to end: `kvgate serve -c FILE` in front of four `kvgate mocker` engines whose workers carry
 * taints from the config and from a watched workers file; requests carry `nvext.routing_constraints` with Dynamo's
 * field names (`required_taints`, `preferred_taints`).
 *
 * issue 30: a request whose required taints no worker carries is refused with a stable code (before, it was served
 * anyway); required taints filter the candidates of a served request and of a query-only one; preferred taints bias
 * the KV choice; bad constraints are 400s naming the field.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServeCli, type CliProcess } from '../../helpers/cli-process.js';
import { postChat, serveConfig, startMockerSuite, type MockerSuite } from '../../helpers/serve-suite.js';

const MODEL = 'taint-model';
const MESSAGES = [{ role: 'user', content: 'Name three lighthouses and the sea each one watches over.' }];

describe('nvext.routing_constraints against worker taints', () => {
  let suite: MockerSuite;
  let url: string;
  let gateway: CliProcess;

  beforeAll(async () => {
    suite = await startMockerSuite('taints', ['--model', MODEL, '--tokenizer', 'demo'], 4);
    const [e1, e2, e3, e4] = suite.engines;
    const entry = (id: number, e: (typeof suite.engines)[number], taints: string): string =>
      `{ id: ${id}, url: "${e.url}", kv_events: "${e.kv_events[0]}", taints: ${taints} }`;
    suite.write('workers.yaml', ['workers:', `  - ${entry(4, e4!, '[l40s]')}`, ''].join('\n'));
    const config = suite.write(
      'kvgate.yaml',
      serveConfig(MODEL, [
        'workers_file: workers.yaml',
        'workers:',
        `  - ${entry(1, e1!, '[h100]')}`,
        `  - ${entry(2, e2!, '[h100, fp8]')}`,
        `  - ${entry(3, e3!, '[]')}`,
      ]),
    );
    ({ proc: gateway, url } = await startServeCli(config));
    suite.procs.push(gateway);
  }, 60_000);

  afterAll(async () => {
    await suite?.stop();
  });

  const chat = async (
    constraints: unknown,
    content = MESSAGES[0]!.content,
  ): Promise<{ status: number; worker: string | null; body: any }> => {
    const res = await postChat(url, {
      model: MODEL,
      messages: [{ role: 'user', content }],
      max_tokens: 2,
      nvext: { routing_constraints: constraints },
    });
    return { status: res.status, worker: res.headers.get('x-kvgate-worker'), body: await res.json() };
  };

  it('serves a request only on workers carrying every required taint (config and workers file alike)', async () => {
    const seen = new Set<string | null>();
    for (let i = 0; i < 8; i++) {
      const r = await chat({ required_taints: ['h100'] }, `${MESSAGES[0]!.content} Variation ${i}.`);
      expect(r.status).toBe(200);
      seen.add(r.worker);
    }
    expect([...seen].every((w) => w === '1' || w === '2')).toBe(true);
    for (let i = 0; i < 3; i++) expect((await chat({ required_taints: ['fp8', 'h100'] })).worker).toBe('2');
    // Worker 4's taint comes from the workers file.
    expect((await chat({ required_taints: ['l40s'] })).worker).toBe('4');
  });

  it('refuses a request whose required taints no worker carries, with KVG_ERR_NO_TAINTED_WORKER', async () => {
    // Each taint exists, but no single worker carries both.
    for (const required of [['a100'], ['l40s', 'h100']]) {
      const r = await chat({ required_taints: required });
      expect(r.status).toBe(400);
      expect(r.body.error.code).toBe('KVG_ERR_NO_TAINTED_WORKER');
      expect(r.body.error.param).toBe('nvext.routing_constraints.required_taints');
      expect(r.body.error.message).toContain(required[0]);
    }
  });

  it('a preferred taint with a factor below 1 draws the KV choice to the workers carrying it', async () => {
    for (let i = 0; i < 6; i++) {
      const r = await chat({ preferred_taints: { fp8: 0.01 } }, `A fresh prompt about tides, number ${i}.`);
      expect(r.status).toBe(200);
      expect(r.worker).toBe('2');
    }
  });

  it('query-only requests honour the constraints too', async () => {
    const route = async (constraints: unknown): Promise<{ status: number; body: any }> => {
      const res = await fetch(`${url}/v1/route`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: MODEL, messages: MESSAGES, nvext: { routing_constraints: constraints } }),
      });
      return { status: res.status, body: await res.json() };
    };
    for (let i = 0; i < 3; i++) {
      const r = await route({ required_taints: ['fp8'] });
      expect(r.status).toBe(200);
      expect(r.body.worker.worker_id).toBe(2);
    }
    const refused = await route({ required_taints: ['a100'] });
    expect(refused.status).toBe(400);
    expect(refused.body.error.code).toBe('KVG_ERR_NO_TAINTED_WORKER');
  });

  it('rejects malformed constraints with a 400 naming the field', async () => {
    const bad = [
      { required_taint: ['h100'] },
      { required_taints: 'h100' },
      { preferred_taints: { fp8: 0 } },
      { preferred_taints: { fp8: 'low' } },
    ];
    for (const constraints of bad) {
      const r = await chat(constraints);
      expect(r.status).toBe(400);
      expect(r.body.error.code).toBe('KVG_ERR_INVALID_REQUEST');
      expect(String(r.body.error.param ?? r.body.error.message)).toContain('routing_constraints');
    }
  });
});
