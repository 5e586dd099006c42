import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { loadGatewayConfig } from '../../src/config/index.js';

const readme = readFileSync(new URL('../../README.md', import.meta.url), 'utf8');
const section = readme.slice(
  readme.indexOf('## Configuration'),
  readme.indexOf('\n## ', readme.indexOf('## Configuration') + 5),
);
const blocks = [...section.matchAll(/```yaml\n([\s\S]*?)```/g)].map((m) => m[1]!);
const dir = mkdtempSync(join(tmpdir(), 'kvgate-readme-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('README configuration examples', () => {
  it('has the reference and the two worked examples', () => {
    expect(blocks.length).toBe(3);
  });

  it.each(blocks.map((b, i) => [i, b] as const))('example %i loads without a problem', (i, yaml) => {
    // Tokenizer folders of the examples stand for real model folders: create them.
    const text = yaml.replace(/\/models\/([A-Za-z0-9.\-_]+)/g, (_, name: string) => {
      const folder = join(dir, name);
      mkdirSync(folder, { recursive: true });
      writeFileSync(join(folder, 'tokenizer.json'), '{}');
      writeFileSync(join(folder, 'tokenizer_config.json'), '{}');
      return folder;
    });
    const file = join(dir, `example-${i}.yaml`);
    writeFileSync(file, text);
    const config = loadGatewayConfig({ file, env: { KVGATE_API_KEYS: 'readme-key-123456' } });
    expect(config.models.length).toBe(1);
    expect(config.warnings).toEqual([]);
  });

  it('the SGLang example is disaggregated with a bootstrap endpoint on its prefill worker', () => {
    const yaml = blocks[2]!.replace(/\/models\/Qwen3-8B/, 'none');
    const file = join(dir, 'sglang.yaml');
    writeFileSync(file, yaml);
    const m = loadGatewayConfig({ file, env: {} }).models[0]!;
    expect(m.workers.map((w) => [w.id, w.role, w.dialect])).toEqual([
      [10, 'prefill', 'sglang'],
      [20, 'decode', 'sglang'],
      [21, 'decode', 'sglang'],
    ]);
    expect(m.workers[0]!.bootstrap).toEqual({ host: '10.0.1.10', port: 8998 });
    expect(m.enforceDisagg).toBe(true);
  });
});
