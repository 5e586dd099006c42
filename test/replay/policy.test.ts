/**
 * The replay's preset policies and the gateway config's `router_preset` read one table: a policy named
 * `dynamo-agentic` in `--compare` routes with exactly the knobs a model with `router_preset:
 * dynamo-agentic` gets.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { loadGatewayConfig } from '../../src/config/index.js';
import { resolveKvRouterConfig } from '../../src/core/index.js';
import { parsePolicies, PRESET_POLICY_NAMES } from '../../src/replay/index.js';

const dir = mkdtempSync(join(tmpdir(), 'kvgate-replay-preset-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('replay: preset policies', () => {
  it('names the peers, not kv, which the replay names itself', () => {
    expect(PRESET_POLICY_NAMES).toEqual(['dynamo', 'dynamo-agentic', 'llm-d', 'lmetric']);
    expect(parsePolicies(['kv'])[0]).toEqual({ kind: 'kv', name: 'kv', options: {}, dynamo: {} });
  });

  it.each(PRESET_POLICY_NAMES)('%s routes with the knobs router_preset gives a gateway model', (name) => {
    const policy = parsePolicies([name])[0]!;
    expect(policy.kind).toBe('kv');
    const path = join(dir, `${name}.yaml`);
    writeFileSync(
      path,
      `models:\n  - name: m\n    router: { router_preset: ${name} }\n` +
        `    workers: [{ id: 1, url: "http://10.0.0.1:8000", kv_events: "tcp://10.0.0.1:5557" }]\n`,
    );
    const model = loadGatewayConfig({ file: path }).models[0]!;
    expect(policy.kind === 'kv' && resolveKvRouterConfig(policy.options)).toEqual(model.router);
    expect(model.router).not.toEqual(resolveKvRouterConfig({}));
  });
});
