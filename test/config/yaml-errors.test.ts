/**
 * A YAML syntax error is reported where an operator can find it: on a line
 * of the file, never on the empty line after its final newline, and without
 * the parser's own "at line L, column C" disagreeing with the position given.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { loadGatewayConfig, type ConfigProblem } from '../../src/config/index.js';

const dir = mkdtempSync(join(tmpdir(), 'kvgate-yaml-errors-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

let n = 0;
function problems(text: string): ConfigProblem[] {
  const file = join(dir, `c${n++}.yaml`);
  writeFileSync(file, text);
  try {
    loadGatewayConfig({ file, env: {} });
  } catch (err) {
    return (err as { detail: { problems: ConfigProblem[] } }).detail.problems;
  }
  throw new Error('expected the config to be rejected');
}

describe('YAML syntax errors', () => {
  it('an unclosed flow mapping on the last line is reported on that line, at the end of the file', () => {
    const text = 'models:\n  - name: m\n    workers:\n      - { id: 1, url: "http://x:1"\n';
    const [p, ...rest] = problems(text);
    expect(rest).toEqual([]);
    const [line] = p!.position!.split(':').map(Number);
    expect(line).toBe(4);
    expect(line).toBeLessThanOrEqual(text.trimEnd().split('\n').length);
    expect(p!.reason).toMatch(/^not valid YAML: .*\(at the end of the file\)$/);
    expect(p!.reason).not.toMatch(/at line \d+/);
  });

  it('an error inside the file keeps its own position', () => {
    const [p] = problems('listen:\n  port: 8080\n models:\n  - name: m\n');
    expect(p!.position).toBe('3:1');
    expect(p!.reason).toBe('not valid YAML: All mapping items must start at the same column');
  });
});
