/** A model's `disagg_policy` (issue 30, conditional disaggregation): defaults, each mode's bounds, and its problems. */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { loadGatewayConfig } from '../../src/config/index.js';
import { kvgateErrorOf } from '../helpers/kvgate-error.js';

const dir = mkdtempSync(join(tmpdir(), 'kvgate-disagg-policy-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const WORKERS = [
  '    workers:',
  '      - { id: 1, url: "http://127.0.0.1:9001", role: prefill }',
  '      - { id: 2, url: "http://127.0.0.1:9002", role: decode, serves_aggregated: true }',
  '    router: { use_kv_events: false }',
];

function load(lines: readonly string[]): ReturnType<typeof loadGatewayConfig> {
  const file = join(dir, 'kvgate.yaml');
  writeFileSync(file, ['models:', '  - name: m', ...WORKERS, ...lines.map((l) => `    ${l}`), ''].join('\n'));
  return loadGatewayConfig({ file, env: {} });
}

const problemsOf = (f: () => unknown): string[] =>
  (kvgateErrorOf(f).detail!.problems as { path: string; reason: string }[]).map((p) => `${p.path}: ${p.reason}`);

describe('disagg_policy', () => {
  it('defaults to always; reads each mode with the bounds it uses', () => {
    expect(load([]).models[0]!.disaggPolicy).toEqual({ mode: 'always', minInputTokens: 0, maxPrefillLoadTokens: 0 });
    expect(load(['disagg_policy: { mode: input_length, min_input_tokens: 512 }']).models[0]!.disaggPolicy).toEqual({
      mode: 'input_length',
      minInputTokens: 512,
      maxPrefillLoadTokens: 0,
    });
    expect(
      load(['disagg_policy: { mode: either, min_input_tokens: 256, max_prefill_load_tokens: 8192 }']).models[0]!
        .disaggPolicy,
    ).toEqual({ mode: 'either', minInputTokens: 256, maxPrefillLoadTokens: 8192 });
  });

  it('names a missing bound, an unread one, and a load mode outside router_mode kv', () => {
    expect(problemsOf(() => load(['disagg_policy: { mode: input_length, max_prefill_load_tokens: 3 }']))).toEqual([
      'models[0].disagg_policy.min_input_tokens: is required by mode input_length',
      'models[0].disagg_policy.max_prefill_load_tokens: is not read by mode input_length',
    ]);
    expect(
      problemsOf(() =>
        load(['router_mode: round-robin', 'disagg_policy: { mode: prefill_load, max_prefill_load_tokens: 3 }']),
      ),
    ).toEqual([
      "models[0].disagg_policy.mode: prefill_load reads the prefill pool's queued prefill tokens, which only router_mode kv tracks",
    ]);
  });
});
