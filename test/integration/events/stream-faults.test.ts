/**
 * issue 13 must-show 5 (items 6 and 7 over real processes): a mocker engine
 * process publishing KV events (with replay) behind `kvgate serve` with a
 * config file. The mocker's fault flags swap adjacent event batches for a
 * while, then flood garbage messages with random sequence numbers; within
 * seconds of each fault ending, the gateway's view of the worker's cache
 * (`POST /v1/route` overlap, query-only) equals what the engine reports
 * (`usage.prompt_tokens_details.cached_tokens` of the same prompt), and no
 * false publisher restart or reset was counted.
 *
 * Runs the compiled CLI (bin/kvgate.js -> dist/), as `npm test` builds it first.
 */
import { describe, expect, it } from 'vitest';
import { seededRng } from '../../../src/common/index.js';
import { until } from '../../helpers/until.js';
import { startEngine, startGateway, suiteProcesses } from './procs.js';

const WORKER_ID = 5;
const BLOCK = 16;
const GARBAGE = 30_000;

async function post(url: string, body: unknown): Promise<{ status: number; json: Record<string, unknown> }> {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return { status: res.status, json: (await res.json()) as Record<string, unknown> };
}

/** Sum of a Prometheus counter's samples whose labels contain every `match`. */
function counter(text: string, name: string, ...match: string[]): number {
  let sum = 0;
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${name}{`) || !match.every((m) => line.includes(m))) continue;
    sum += Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return sum;
}

describe('event streams heal over real processes (reordered batches, garbage flood)', () => {
  const procs = suiteProcesses('kvgate-stream-faults-');

  it("the worker's index is back to what its engine holds within seconds of each fault ending", async () => {
    const engine = await startEngine(procs, ['--kv-events-replay-port', '0', '--seed', '11']);
    const url = await startGateway(
      procs,
      {
        name: engine.model,
        block_size: BLOCK,
        workers: [
          {
            id: WORKER_ID,
            url: engine.url,
            kv_events: {
              endpoint: (engine.kv_events as string[])[0],
              replay: (engine.kv_events_replay as string[])[0],
            },
          },
        ],
      },
      { kv_events: { inconsistent_after_ms: 2000 } },
    );
    const engineUrl = String(engine.url);
    const model = String(engine.model);
    const rng = seededRng(13);
    const prompts: number[][] = [];
    /** A fresh prompt of `blocks` full blocks plus one token (the engine caches full blocks). */
    const fresh = (blocks: number): number[] => {
      const p = Array.from({ length: blocks * BLOCK + 1 }, () => 1000 + Math.floor(rng() * 50_000));
      prompts.push(p);
      return p;
    };
    const complete = async (prompt: number[]): Promise<number> => {
      const r = await post(`${url}/v1/completions`, { model, prompt, max_tokens: 1 });
      expect(r.status).toBe(200);
      return (
        (r.json.usage as { prompt_tokens_details?: { cached_tokens?: number } }).prompt_tokens_details?.cached_tokens ??
        0
      );
    };
    const overlapTokens = async (prompt: number[]): Promise<number> => {
      const r = await post(`${url}/v1/route`, { model, prompt });
      expect(r.status).toBe(200);
      return (r.json.overlap_blocks as number) * BLOCK;
    };
    const faults = (f: Record<string, unknown>) => post(`${engineUrl}/admin/faults`, f);
    /** Every prompt sent so far: the gateway's overlap equals the engine's cached tokens (asked without changing the engine: the prompts are all cached already). */
    const agrees = async (): Promise<boolean> => {
      for (const p of prompts) {
        const predicted = await overlapTokens(p);
        if (predicted !== p.length - 1) return false;
      }
      return true;
    };

    // Warm up until the subscription is live (ZMQ slow joiner).
    await until(
      async () => {
        const p = fresh(4);
        await complete(p);
        return (await overlapTokens(p)) === 4 * BLOCK;
      },
      "the gateway follows the engine's events",
      20_000,
    );

    // Reordered batches: adjacent pairs swapped while 40 conversations run.
    await faults({ reorder_events: true });
    await Promise.all(
      Array.from({ length: 4 }, async () => {
        for (let i = 0; i < 10; i++) await complete(fresh(3 + (i % 4)));
      }),
    );
    await faults({ reorder_events: false });
    const reorderEnded = Date.now();
    await until(agrees, 'index equal to the engine after reordering', 5000);
    const healedAfterReorderMs = Date.now() - reorderEnded;
    // The engine agrees: each prompt is fully cached there too.
    for (const p of prompts.slice(-5)) expect(await complete(p)).toBe(p.length - 1);

    // Garbage: random sequence numbers, each an AllBlocksCleared that would wipe the worker if applied.
    await faults({ garbage_event_flood: GARBAGE });
    for (let i = 0; i < 10; i++) await complete(fresh(2 + (i % 3)));
    await until(
      async () => {
        const m = await (await fetch(`${url}/metrics`)).text();
        return counter(m, 'kvgate_kv_event_dropped_total', `worker_id="${WORKER_ID}"`) >= GARBAGE;
      },
      'every garbage message counted as dropped',
      30_000,
    );
    const floodEnded = Date.now();
    await until(agrees, 'index equal to the engine after the garbage flood', 5000);
    const healedAfterFloodMs = Date.now() - floodEnded;
    for (const p of prompts.slice(-5)) expect(await complete(p)).toBe(p.length - 1);

    const metrics = await (await fetch(`${url}/metrics`)).text();
    expect(counter(metrics, 'kvgate_kv_event_publisher_restarts_total', `worker_id="${WORKER_ID}"`)).toBe(0);
    expect(counter(metrics, 'kvgate_kv_event_resets_total', `worker_id="${WORKER_ID}"`)).toBe(0);
    expect(
      counter(metrics, 'kvgate_kv_event_dropped_total', `worker_id="${WORKER_ID}"`, 'reason="garbage"'),
    ).toBeGreaterThan(0);
    expect(healedAfterReorderMs).toBeLessThan(5000);
    expect(healedAfterFloodMs).toBeLessThan(5000);
  }, 120_000);
});
