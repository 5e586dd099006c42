/**
 * A client's engine `priority` end to end: `kvgate serve` in front of a `kvgate mocker` engine in vLLM's priority
 * scheduling (lowest first) with one seat, real processes over real sockets. While a long stream holds the seat,
 * requests wait at the engine; the order it answers them in shows the `priority` each reached it with.
 *
 * Without `tenants` (the default class sets no `engine_priority`) a client's `priority` is not forwarded: a request
 * asking for -10 waits its turn behind one that asked for nothing. With a class `ops` allowed [-5, 5], its -100
 * reaches the engine as -5 (a tie with an earlier -5, so served after it), and the default class's -3 is dropped.
 * Each is counted in `kvgate_tenant_priority_limits_total`.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { engineAnswerOrder } from '../../helpers/engine-order.js';
import { metric } from '../../helpers/metric-sum.js';
import {
  serveConfig,
  serveInSuite,
  startMockerSuite,
  workerEntry,
  type MockerSuite,
} from '../../helpers/serve-suite.js';

const MODEL = 'mock-model';
const KEY_OPS = 'ops-key-000001';
const KEY_GUEST = 'guest-key-00002';

let suite: MockerSuite;
let engineUrl: string;
let plain: string;
let tenanted: string;

beforeAll(async () => {
  suite = await startMockerSuite(
    'engine-priority',
    ['--tokenizer', 'demo', '--scheduling-policy', 'priority', '--max-num-seqs', '1'],
    1,
  );
  const engine = suite.engines[0]!;
  engineUrl = engine.url;
  const model = ['workers:', `  - ${workerEntry(1, engine)}`];
  plain = await serveInSuite(suite, suite.write('plain.yaml', serveConfig(MODEL, model)));
  const tenants = serveConfig(MODEL, model, [
    'preprocess: { threads: 0 }',
    `auth: { api_keys: [${KEY_OPS}, ${KEY_GUEST}] }`,
    'tenants:',
    '  default_class: guests',
    '  classes:',
    '    - { name: guests }',
    '    - { name: ops, engine_priority: { min: -5, max: 5 } }',
    '  members:',
    `    - { name: ops, class: ops, api_keys: [${KEY_OPS}] }`,
  ]);
  tenanted = await serveInSuite(suite, suite.write('tenants.yaml', tenants));
}, 60_000);

afterAll(async () => {
  await suite?.stop();
});

const chat = (label: string, extra: Record<string, unknown> = {}) => ({
  model: MODEL,
  messages: [{ role: 'user', content: `${label} asks something` }],
  max_tokens: 8,
  ...extra,
});

describe("a client's engine priority", () => {
  it('is not forwarded where its class sets no engine_priority: a -10 waits its turn', async () => {
    const order = await engineAnswerOrder(engineUrl, plain, { body: chat('holder') }, [
      { label: 'first', body: chat('first') },
      { label: 'jumper', body: chat('jumper', { priority: -10 }) },
    ]);
    expect(order).toEqual(['first', 'jumper']);
    expect(await metric(plain, 'kvgate_tenant_priority_limits_total', { tenant: 'other', action: 'stripped' })).toBe(1);
  });

  it("is clamped into its class's engine_priority range, and dropped for a class without one", async () => {
    const as = (key: string) => ({ authorization: `Bearer ${key}` });
    const order = await engineAnswerOrder(engineUrl, tenanted, { headers: as(KEY_GUEST), body: chat('holder') }, [
      { label: 'guest', headers: as(KEY_GUEST), body: chat('guest', { priority: -3 }) },
      { label: 'ops-a', headers: as(KEY_OPS), body: chat('ops-a', { priority: -5 }) },
      { label: 'ops-b', headers: as(KEY_OPS), body: chat('ops-b', { priority: -100 }) },
    ]);
    expect(order).toEqual(['ops-a', 'ops-b', 'guest']);
    const limits = (tenant: string, action: string) =>
      metric(tenanted, 'kvgate_tenant_priority_limits_total', { tenant, hint: 'engine_priority', action });
    expect(await limits('other', 'stripped')).toBe(1);
    expect(await limits('ops', 'clamped')).toBe(1);
    expect(await limits('ops', 'stripped')).toBe(0);
  });
});
