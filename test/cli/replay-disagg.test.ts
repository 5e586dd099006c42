/**
 * `kvgate replay --scenario conditional-disagg` through the compiled CLI: one row per disagg_policy, as JSON, and
 * clear usage errors for a bad scenario or bound.
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

const run = promisify(execFile);
const BIN = new URL('../../bin/kvgate.js', import.meta.url).pathname;

describe('kvgate replay --scenario conditional-disagg', () => {
  it('prints one row per policy with the share each disaggregated', async () => {
    const { stdout } = await run(process.execPath, [
      BIN,
      'replay',
      '--scenario',
      'conditional-disagg',
      '--requests',
      '40',
      '--seed',
      '5',
      '--json',
    ]);
    const rows = (JSON.parse(stdout) as { rows: { policy: string; completed: number; disaggregatedShare: number }[] })
      .rows;
    expect(rows.map((r) => r.policy)).toEqual([
      'always',
      'never',
      'input_length >= 1024',
      'prefill_load <= 4096',
      'either',
    ]);
    expect(rows.map((r) => r.completed)).toEqual([40, 40, 40, 40, 40]);
    expect(rows[0]!.disaggregatedShare).toBe(1);
    expect(rows[1]!.disaggregatedShare).toBe(0);
  }, 120_000);

  it("is named in the replay's own help, which points to its help", async () => {
    const { stdout } = await run(process.execPath, [BIN, 'replay', '--help']);
    expect(stdout).toContain('kvgate replay --scenario conditional-disagg --help');
    const own = await run(process.execPath, [BIN, 'replay', '--scenario', 'conditional-disagg', '--help']);
    expect(own.stdout).toMatch(/^usage: kvgate replay --scenario conditional-disagg/);
  });

  it('refuses an unknown scenario and a bad bound with exit code 2', async () => {
    for (const args of [
      ['--scenario', 'nope'],
      ['--scenario', 'conditional-disagg', '--min-input-tokens', 'many'],
    ]) {
      const err = await run(process.execPath, [BIN, 'replay', ...args]).catch(
        (e: { code: number; stderr: string }) => e,
      );
      expect((err as { code: number }).code, args.join(' ')).toBe(2);
      expect((err as { stderr: string }).stderr).toMatch(/kvgate replay: --/);
    }
  });
});
