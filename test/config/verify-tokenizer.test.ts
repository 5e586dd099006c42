/**
 * `verify_tokenizer` (per model, default false): a boolean, and only where KV events exist to compare
 * (issue 16, tokenizer agreement probe).
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { loadGatewayConfig, type ConfigProblem } from '../../src/config/index.js';

const dir = mkdtempSync(join(tmpdir(), 'kvgate-verify-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function load(model: string): ReturnType<typeof loadGatewayConfig> {
  const path = join(dir, `c${Math.random().toString(36).slice(2)}.yaml`);
  writeFileSync(
    path,
    `models:\n  - name: m\n    tokenizer: none\n${model}    workers:\n      - { id: 1, url: "http://10.0.0.1:8000", kv_events: "tcp://10.0.0.1:5557" }\n`,
  );
  return loadGatewayConfig({ file: path, env: {} });
}

function problems(model: string): Record<string, string> {
  try {
    load(model);
  } catch (err) {
    const ps = (err as { detail: { problems: ConfigProblem[] } }).detail.problems;
    return Object.fromEntries(ps.map((p) => [p.path, p.reason]));
  }
  throw new Error('expected the config to be rejected');
}

describe('config: verify_tokenizer', () => {
  it('defaults to false and reads true', () => {
    expect(load('').models[0]!.verifyTokenizer).toBe(false);
    expect(load('    verify_tokenizer: true\n').models[0]!.verifyTokenizer).toBe(true);
  });

  it('field-named errors: not a boolean; without KV events to compare', () => {
    expect(problems('    verify_tokenizer: "yes"\n')['models[0].verify_tokenizer']).toMatch(/true or false/);
    expect(
      problems('    verify_tokenizer: true\n    router_mode: round-robin\n')['models[0].verify_tokenizer'],
    ).toMatch(/router_mode kv with KV events/);
    expect(
      problems('    verify_tokenizer: true\n    router: { use_kv_events: false }\n')['models[0].verify_tokenizer'],
    ).toMatch(/KV events/);
  });
});
