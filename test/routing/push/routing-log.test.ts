/**
 * Dynamo's `[ROUTING]` debug line: each routing decision, written only when debug lines are on, with the facts the
 * decision's span carries (worker, rank, cached blocks of the prompt's, cost and its inputs).
 */
import { afterEach, describe, expect, it } from 'vitest';
import { ManualClock, seededRng, silentLogger, type Logger } from '../../../src/common/index.js';
import { KvRouter, PushRouter, makeRouterContext } from '../../../src/routing/index.js';
import { FakeEngine } from './fake-engine.js';
import { BS, MODEL, completionLeg } from './push-fixtures.js';
import { worker } from './push-pool.js';

const routers: PushRouter[] = [];
afterEach(() => {
  for (const r of routers.splice(0)) r.close();
});

function routerLogging(debug: boolean): {
  push: PushRouter;
  lines: { fields: Record<string, unknown>; msg: string }[];
} {
  const lines: { fields: Record<string, unknown>; msg: string }[] = [];
  const logger: Logger = {
    ...silentLogger,
    debug: (fields, msg) => lines.push({ fields, msg }),
    child: () => logger,
    isLevelEnabled: () => debug,
  };
  const clock = new ManualClock(1_000);
  const kv = new KvRouter({ blockSize: BS, clock, rng: seededRng(5) });
  const push = new PushRouter(
    { model: MODEL, role: 'aggregated', mode: 'kv', blockSize: BS, kvRouter: kv, engine: new FakeEngine().client },
    makeRouterContext({ clock, rng: seededRng(7), logger }),
  );
  routers.push(push);
  for (const id of [1, 2]) push.addWorker(worker(id));
  return { push, lines };
}

describe('[ROUTING] debug lines', () => {
  // issue 30: the facts were on span attributes only.
  it('logs each decision with its worker, cached blocks and cost when debug is on', async () => {
    const { push, lines } = routerLogging(true);
    const sel = await push.select(completionLeg('leg-log', 1_000), 'query');
    expect(lines).toHaveLength(1);
    const [line] = lines;
    expect(line!.msg).toMatch(
      new RegExp(
        `^\\[ROUTING\\] aggregated worker ${sel.slot.workerId} dp_rank 0: 0/\\d+ blocks cached, cost [\\d.]+ of 2 candidates$`,
      ),
    );
    expect(line!.fields).toMatchObject({
      requestId: 'leg-log',
      worker_id: sel.slot.workerId,
      dp_rank: 0,
      overlap_blocks: 0,
      candidates: 2,
      'route.mode': 'query',
    });
    expect(typeof line!.fields['cost.prefill_tokens']).toBe('number');
    // The model comes from the model's logger, bound to it; a field of its own would write the key twice.
    expect(line!.fields).not.toHaveProperty('model');
  });

  it('builds no line when debug is off', async () => {
    const { push, lines } = routerLogging(false);
    await push.select(completionLeg('leg-quiet', 1_000), 'query');
    expect(lines).toHaveLength(0);
  });
});
