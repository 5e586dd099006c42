/**
 * Issue 12 item 2: the per-worker load gauges are read from the scheduler's
 * bookkeeping when scraped (they used to be written only at dispatch and
 * release, so mid-stream they still showed the prompt's tokens), and every
 * router series exists at zero from the start.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { startFleet, prepare, randomTokens, type Fleet } from '../../helpers/fleet.js';
import { seededRng } from '../../../src/common/index.js';

/** The value of `name` for worker `id` (rank 0) in the scrape. */
function gauge(text: string, name: string, id: number): number | undefined {
  const line = text
    .split('\n')
    .find((l) => l.startsWith(`${name}{`) && l.includes(`worker_id="${id}"`) && l.includes('dp_rank="0"'));
  return line === undefined ? undefined : Number(line.slice(line.indexOf('}') + 1).trim());
}

function gauges(
  text: string,
  id: number,
): { requests: number | undefined; prefill: number | undefined; blocks: number | undefined } {
  return {
    requests: gauge(text, 'kvgate_worker_active_requests', id),
    prefill: gauge(text, 'kvgate_worker_active_prefill_tokens', id),
    blocks: gauge(text, 'kvgate_worker_active_decode_blocks', id),
  };
}

describe('per-worker load gauges at scrape time', () => {
  let f: Fleet | undefined;
  afterEach(async () => {
    await f?.close();
    f = undefined;
  });

  it('every series is registered at zero before the first request, per worker as workers join', async () => {
    f = await startFleet(2, { kvEvents: false });
    const text = await f.metrics.text();
    for (const id of [1, 2]) expect(gauges(text, id)).toEqual({ requests: 0, prefill: 0, blocks: 0 });
    // Aggregated workers: per-request series under worker_type="aggregated", TTFT per worker.
    expect(text).toMatch(/kvgate_router_requests_total\{model="mock-model",worker_type="aggregated"\} 0/);
    for (const id of [1, 2])
      expect(text).toMatch(
        new RegExp(
          `kvgate_router_time_to_first_token_seconds_count\\{model="mock-model",worker_type="aggregated",worker_id="${id}"\\} 0`,
        ),
      );
    expect(text).toMatch(
      /kvgate_router_prediction_total\{model="mock-model",worker_type="aggregated",outcome="under"\} 0/,
    );
    expect(text).toMatch(/kvgate_router_overhead_seconds_count\{model="mock-model",stage="scheduling"\} 0/);
    expect(text).toMatch(/kvgate_router_queue_pending_requests\{model="mock-model",worker_type="aggregated"\} 0/);
    expect(text).toMatch(/kvgate_router_disagg_fallbacks_total\{model="mock-model"\} 0/);
    // A worker that leaves takes its series with it.
    f.registry.remove(2);
    expect(gauge(await f.metrics.text(), 'kvgate_worker_active_requests', 2)).toBeUndefined();
  });

  it("a scrape mid-stream equals the scheduler's state (prompt tokens gone after the first token)", async () => {
    // Realistic speed: 40 tokens take long enough to scrape in between.
    f = await startFleet(1, { kvEvents: false, mocker: { speedup: 1 } });
    const req = prepare(randomTokens(seededRng(5), 256), { maxTokens: 40 });
    const res = await f.router.route(req);
    expect(res.body.kind).toBe('sse');
    const it = (res.body as { events: AsyncIterable<{ data: string | Uint8Array }> }).events[Symbol.asyncIterator]();
    // Read up to the first generated token.
    for (;;) {
      const next = await it.next();
      expect(next.done).toBe(false);
      const data = String(next.value.data);
      if (data !== '[DONE]' && (JSON.parse(data) as { choices: { text?: string }[] }).choices[0]?.text) break;
    }
    const load = f.router.decode.kvRouter!.load({ workerId: 1, dpRank: 0 })!;
    expect(load.activeRequests).toBe(1);
    expect(load.activePrefillTokens).toBe(0);
    const mid = gauges(await f.metrics.text(), 1);
    expect(mid).toEqual({
      requests: load.activeRequests,
      prefill: load.activePrefillTokens,
      blocks: load.activeDecodeBlocks,
    });
    for (let n = await it.next(); n.done !== true; n = await it.next()) {
      /* drain */
    }
    expect(gauges(await f.metrics.text(), 1)).toEqual({ requests: 0, prefill: 0, blocks: 0 });
  });
});
