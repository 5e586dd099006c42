import { getHeapStatistics } from 'node:v8';
import { describe, expect, it } from 'vitest';
import { tuneV8 } from '../../src/cli/v8-tuning.js';

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
