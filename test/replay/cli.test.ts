import { afterEach, describe, expect, it, vi } from 'vitest';
import { commandLine, parseReplayArgs, replayCommand as run } from '../../src/cli/replay.js';
import { SUBCOMMANDS } from '../../src/cli/index.js';

const SMALL = new URL('../fixtures/traces/small.jsonl', import.meta.url).pathname;
const BAD = new URL('../fixtures/traces/bad-lines.jsonl', import.meta.url).pathname;

function capture(): { out: string[]; err: string[] } {
  const out: string[] = [];
  const err: string[] = [];
  vi.spyOn(process.stdout, 'write').mockImplementation((s: string | Uint8Array) => (out.push(String(s)), true));
  vi.spyOn(process.stderr, 'write').mockImplementation((s: string | Uint8Array) => (err.push(String(s)), true));
  return { out, err };
}

afterEach(() => {
  vi.restoreAllMocks();
});

describe('kvgate replay command line', () => {
  it('is registered as a subcommand', () => {
    expect(SUBCOMMANDS.replay?.summary).toMatch(/replay/);
  });

  it("parses policies, variants, topology, workload and engine flags (the mocker's)", () => {
    const plan = parseReplayArgs([
      '--trace',
      't.jsonl',
      '--compare',
      'kv,round-robin',
      '--router-config',
      '{"router_temperature":0.5}',
      '--prefill-workers',
      '2',
      '--decode-workers',
      '4',
      '--disagg-protocol',
      'bootstrap',
      '--speedup',
      '3',
      '--arrival',
      'spread',
      '--max-isl',
      '8192',
      '--seed',
      '9',
      '--num-gpu-blocks',
      '4096',
      '--block-size',
      '32',
      '--engine-speedup',
      '2',
      '--perf-profile',
      'h100',
      '--json',
      '--no-progress',
    ]);
    const c = plan.config;
    expect(c.policies.map((p) => p.name)).toEqual(['kv', 'round-robin', 'kv[router_temperature=0.5]']);
    expect(c.topology).toEqual({
      kind: 'disaggregated',
      prefillWorkers: 2,
      decodeWorkers: 4,
      protocols: ['bootstrap'],
    });
    expect(c.workload).toEqual({ arrival: 'spread', speedup: 3, maxIsl: 8192 });
    expect(c.engine).toMatchObject({
      numGpuBlocks: 4096,
      blockSize: 32,
      speedup: 2,
      perfProfile: 'h100',
      port: 0,
      kvEventsPort: 0,
    });
    expect(c.seed).toBe(9);
    expect(plan.json).toBe(true);
    expect(plan.progress).toBe(false);
    const d = parseReplayArgs(['--trace', 't']).config;
    expect(d.policies.map((p) => p.name)).toEqual(['kv']);
    expect(d.topology).toEqual({ kind: 'aggregated', workers: 8 });
    expect(d.mode).toBe('offline');
  });

  it('rejects bad usage with a message naming the flag', () => {
    expect(() => parseReplayArgs([])).toThrow(/--trace FILE is required/);
    expect(() => parseReplayArgs(['--trace', 't', '--compare', 'fastest'])).toThrow(/unknown policy 'fastest'/);
    expect(() => parseReplayArgs(['--trace', 't', '--prefill-workers', '2'])).toThrow(/go together/);
    expect(() => parseReplayArgs(['--trace', 't', '--speedup', '0'])).toThrow(/--speedup 0/);
    expect(() => parseReplayArgs(['--trace', 't', '--session-priority'])).toThrow(/--scheduling-policy priority/);
    const priority = ['--trace', 't', '--session-priority', '--scheduling-policy', 'priority'];
    expect(parseReplayArgs(priority).config.sessionPriority).toBe(true);
    expect(parseReplayArgs([...priority, '--mode', 'online']).config.sessionPriority).toBe(true);
    const evicting = ['--trace', 't', '--session-priority', '--eviction-policy', 'priority'];
    expect(parseReplayArgs(evicting).config.sessionPriority).toBe(true);
    expect(() => parseReplayArgs(['--trace', 't', '--session-pins'])).toThrow(/--workload agentic/);
    const pins = ['--workload', 'agentic', '--session-pins'];
    expect(parseReplayArgs([...pins, '--mode', 'online']).config.sessionPins).toBe(true);
    expect(parseReplayArgs([...pins, '--prefill-workers', '1', '--decode-workers', '1']).config.sessionPins).toBe(true);
    expect(parseReplayArgs(pins).config.sessionPins).toBe(true);
    expect(() => parseReplayArgs(['--trace', 't', '--router-config', '{"router_temprature":1}'])).toThrow(
      /router_temprature/,
    );
    expect(() => parseReplayArgs(['--trace', 't', '--count', '3'])).toThrow(/count/);
    expect(() => parseReplayArgs(['--trace', 't', '--mode', 'hybrid'])).toThrow(/offline or online/);
  });

  it('quotes the command for provenance', () => {
    expect(commandLine(['--trace', 'a b.jsonl', '--router-config', '{"x":1}'])).toBe(
      `kvgate replay --trace 'a b.jsonl' --router-config '{"x":1}'`,
    );
  });

  it('prints JSON with every policy to stdout, and reports skipped lines on stderr', async () => {
    const { out, err } = capture();
    const code = await run(['--trace', BAD, '--compare', 'kv,random', '--workers', '2', '--json', '--no-progress']);
    vi.restoreAllMocks();
    expect(code).toBe(0);
    const json = JSON.parse(out.join('')) as {
      policies: Record<
        string,
        { ttft_ms: { mean: number }; hit_rate: number; hit_rate_bound: number; load_imbalance: number }
      >;
    };
    expect(Object.keys(json.policies)).toEqual(['kv', 'random']);
    for (const p of Object.values(json.policies)) {
      expect(typeof p.ttft_ms.mean).toBe('number');
      expect(typeof p.hit_rate_bound).toBe('number');
      expect(p.load_imbalance).toBeGreaterThanOrEqual(1);
    }
    const e = err.join('');
    expect(e).toContain('skipped 7 invalid trace line(s)');
    expect(e).toContain('line 6: timestamp 25 is earlier');
  });

  it("reports each kv policy's prefix index: its peak, the budget it was held to and what that evicted", async () => {
    const { out } = capture();
    const args = ['--workload', 'agentic', '--sessions', '4', '--median-turns', '4', '--seed', '1', '--workers', '4'];
    const budget = ['--router-config', JSON.stringify({ router_index_memory_budget_mib: 0.5 })];
    const code = await run([...args, '--compare', 'kv,round-robin', ...budget, '--json', '--no-progress']);
    vi.restoreAllMocks();
    expect(code).toBe(0);
    type Index = { pool: string; budget_bytes: number | null; peak_bytes: number; evicted_entries: number };
    const json = JSON.parse(out.join('')) as { policies: Record<string, { prefix_index: Index[] }> };
    const [unbounded] = json.policies.kv!.prefix_index;
    const [bounded] = json.policies['kv[router_index_memory_budget_mib=0.5]']!.prefix_index;
    // Without a budget the sessions' contexts take the index past 0.5 MiB; with it, it stays within and evicts.
    expect(unbounded).toMatchObject({ pool: 'engines', budget_bytes: null, evicted_entries: 0 });
    expect(unbounded!.peak_bytes).toBeGreaterThan(0.5 * 2 ** 20);
    expect(bounded).toMatchObject({ pool: 'engines', budget_bytes: 0.5 * 2 ** 20 });
    expect(bounded!.peak_bytes).toBeLessThanOrEqual(0.5 * 2 ** 20);
    expect(bounded!.evicted_entries).toBeGreaterThan(0);
    // A policy without a prefix index reports none.
    expect(json.policies['round-robin']!.prefix_index).toEqual([]);

    const md = capture();
    expect(await run([...args, '--compare', 'kv', ...budget, '--no-progress'])).toBe(0);
    vi.restoreAllMocks();
    expect(md.out.join('')).toMatch(
      /\| kv\[router_index_memory_budget_mib=0\.5\] \| engines \| 0\.\d MiB \| 0\.5 MiB \| [1-9]\d* \|/,
    );
  });

  it('prints the Markdown table by default; exit code 2 on usage errors, 1 on a rejected trace', async () => {
    const { out, err } = capture();
    expect(
      await run([
        '--trace',
        SMALL,
        '--compare',
        'round-robin',
        '--workers',
        '2',
        '--max-requests',
        '10',
        '--no-progress',
      ]),
    ).toBe(0);
    expect(out.join('')).toMatch(/\| round-robin \| /);
    expect(await run(['--trace', SMALL, '--bogus'])).toBe(2);
    expect(await run(['--trace', BAD, '--strict', '--no-progress'])).toBe(1);
    vi.restoreAllMocks();
    expect(err.join('')).toContain('strict mode');
  });
});
