/**
 * The README's "Disaggregated serving" example config loads without a
 * problem and describes the topology its commands start.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { loadGatewayConfig } from '../../../src/config/index.js';
import { parseDocument } from 'yaml';

const readme = readFileSync(new URL('../../../README.md', import.meta.url), 'utf8');
const start = readme.indexOf('## Disaggregated serving');
const section = readme.slice(start, readme.indexOf('\n## ', start + 5));

describe('README: disaggregated serving', () => {
  it('the pd.yaml example is a valid SGLang P/D config matching the mocker command lines', () => {
    expect(start).toBeGreaterThan(0);
    const blocks = [...section.matchAll(/```yaml\n([\s\S]*?)```/g)].map((m) => m[1]!);
    expect(blocks).toHaveLength(1);
    const config = loadGatewayConfig({ base: parseDocument(blocks[0]!).toJS() as Record<string, unknown>, env: {} });
    expect(config.warnings).toEqual([]);
    const m = config.models[0]!;
    expect(m.workers.map((w) => [w.id, w.role, w.dialect, w.url, w.bootstrap?.port])).toEqual([
      [1, 'prefill', 'sglang', 'http://127.0.0.1:8100', 8998],
      [2, 'prefill', 'sglang', 'http://127.0.0.1:8101', 8999],
      [3, 'decode', 'sglang', 'http://127.0.0.1:8200', undefined],
      [4, 'decode', 'sglang', 'http://127.0.0.1:8201', undefined],
    ]);
    expect(m.workers.map((w) => w.kvEvents?.endpoint)).toEqual([
      'tcp://127.0.0.1:5600',
      'tcp://127.0.0.1:5601',
      'tcp://127.0.0.1:5700',
      'tcp://127.0.0.1:5701',
    ]);
    // The commands start exactly these ports.
    expect(section).toMatch(/--mode prefill --count 2 --port 8100 --kv-events-port 5600 --bootstrap-port 8998/);
    expect(section).toMatch(/--mode decode --count 2 --port 8200 --kv-events-port 5700/);
  });
});
