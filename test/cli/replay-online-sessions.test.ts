/**
 * Online replay's sessions: the load generator names each request's session as its agent client would
 * (`x-session-id`, `x-parent-session-id`), records the worker the gateway chose (`x-kvgate-worker`), and the
 * policy's gateway gets `session_affinity: pin` / `session_priority` from the replay's flags. Real mocker engines
 * behind the real gateway over HTTP; `round-robin` pins named sessions (its default), so a session stays on one
 * worker only when its requests are named.
 */
import { describe, expect, it } from 'vitest';
import { REPLAY_MODEL, gatewayConfig, startFleet } from '../../src/cli/replay-online.js';
import { generateLoad } from '../../src/replay/load-generator.js';
import { buildWorkload, parsePolicies, parseTrace, TokenSynthesizer, type Workload } from '../../src/replay/index.js';

const SESSIONS = 3;
const rows = Array.from({ length: 4 * SESSIONS }, (_, i) => ({
  timestamp: i * 10,
  input_length: 500,
  output_length: 2,
  hash_ids: [1000 + i],
}));
const base = buildWorkload(parseTrace(rows.map((r) => JSON.stringify(r)).join('\n')));
const workload: Workload = {
  ...base,
  requests: base.requests.map((r) => ({
    ...r,
    // Four turns a session, the later sessions the first one's subagents; each turn sent once the one before it
    // was answered, as an agent sends them (so the gateway has bound the session by then).
    session: r.index < 4 ? { id: 's0' } : { id: `s${Math.floor(r.index / 4)}`, parentId: 's0' },
    ...(r.index > 0 ? { after: { requests: [r.index - 1], pauseMs: 0 } } : {}),
  })),
};

async function workersBySession(sessions: boolean): Promise<Map<string, Set<number>>> {
  const fleet = await startFleet(parsePolicies(['round-robin'])[0]!, { kind: 'aggregated', workers: 3 }, {}, 1, 100);
  try {
    const run = await generateLoad(workload, {
      url: fleet.url,
      model: REPLAY_MODEL,
      synth: new TokenSynthesizer({ traceBlockSize: 512, seed: 1 }),
      requestSeed: (i) => i,
      bucketMs: 100,
      sessions,
    });
    const by = new Map<string, Set<number>>();
    for (const r of workload.requests) {
      const o = run.outcomes[r.index]!;
      expect(o.error).toBeNull();
      expect([1, 2, 3]).toContain(o.workerId);
      const id = r.session!.id;
      by.set(id, (by.get(id) ?? new Set()).add(o.workerId!));
    }
    return by;
  } finally {
    await fleet.close();
  }
}

describe('online replay sessions', () => {
  it("names each request's session, so the gateway keeps it on one worker; unnamed, round-robin spreads it", async () => {
    const named = await workersBySession(true);
    expect([...named.values()].every((w) => w.size === 1)).toBe(true);
    const unnamed = await workersBySession(false);
    expect([...unnamed.values()].some((w) => w.size > 1)).toBe(true);
  }, 60_000);

  it("puts the replay's session flags in the policy's gateway config", () => {
    const kv = parsePolicies(['kv'])[0]!;
    const model = (s?: { priority: boolean; pins: boolean }) =>
      (gatewayConfig(kv, [], 16, 'vllm', s) as { models: Record<string, unknown>[] }).models[0]!;
    expect(model()).not.toHaveProperty('session_priority');
    expect(model()).not.toHaveProperty('session_affinity');
    expect(model({ priority: true, pins: true })).toMatchObject({
      session_priority: 'lower_first',
      session_affinity: 'pin',
    });
  });
});
