import { spawnSync } from 'node:child_process';
import { getHeapStatistics } from 'node:v8';
import { describe, expect, it } from 'vitest';
import { tuneHeapGrowth, tuneV8 } from '../../src/cli/v8-tuning.js';
import { BIN, ROOT, assertBuilt } from '../helpers/process.js';

describe("tuneV8 (the kvgate launcher's V8 settings)", () => {
  it('turns allocation-site pretenuring off by default, and V8 takes the flag at run time', () => {
    expect(tuneV8({})).toEqual(['--no-allocation-site-pretenuring']);
    // The process goes on as before (a flag V8 refused at run time would have thrown or aborted).
    expect(getHeapStatistics().total_heap_size).toBeGreaterThan(0);
  });

  it("keeps V8's defaults when KVGATE_V8_PRETENURING=on", () => {
    expect(tuneV8({ KVGATE_V8_PRETENURING: 'on' })).toEqual([]);
  });
});

describe("tuneHeapGrowth (the kvgate launcher's heap growing factor)", () => {
  it('fixes the factor at 4 by default, and V8 takes the flag at run time', () => {
    expect(tuneHeapGrowth({})).toEqual(['--heap-growing-percent=300']);
    expect(getHeapStatistics().total_heap_size).toBeGreaterThan(0);
  });

  it("sets another factor, or keeps V8's own with 0", () => {
    expect(tuneHeapGrowth({ KVGATE_V8_HEAP_GROWING_PERCENT: '100' })).toEqual(['--heap-growing-percent=100']);
    expect(tuneHeapGrowth({ KVGATE_V8_HEAP_GROWING_PERCENT: '0' })).toEqual([]);
  });

  it('refuses a percent that is not a whole number from 0 to 1,000, naming the variable', () => {
    for (const bad of ['-1', '1.5', 'x', '1001', '3e2'])
      expect(() => tuneHeapGrowth({ KVGATE_V8_HEAP_GROWING_PERCENT: bad })).toThrow(
        /KVGATE_V8_HEAP_GROWING_PERCENT must be a whole/,
      );
  });

  it('the kvgate command exits with the message, not a stack, on such a value', () => {
    assertBuilt();
    const run = spawnSync(process.execPath, [BIN, '--version'], {
      cwd: ROOT,
      encoding: 'utf8',
      env: { ...process.env, KVGATE_V8_HEAP_GROWING_PERCENT: 'lots' },
    });
    expect(run.status).toBe(1);
    expect(run.stderr).toMatch(/^kvgate: KVGATE_V8_HEAP_GROWING_PERCENT must be a whole number .* got "lots"\n$/);
  });
});
