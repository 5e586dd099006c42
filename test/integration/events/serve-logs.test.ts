/**
 * `kvgate serve` as an operator runs it (a real process, a config file, a real
 * mocker engine process publishing KV events over ZMQ) reports a broken event
 * stream in its log: when the engine loses KV-event batches on the wire, the
 * gateway's stdout carries a pino warn line naming the worker.
 *
 * Runs the compiled CLI (bin/kvgate.js -> dist/), as `npm test` builds it first.
 */
import { describe, expect, it } from 'vitest';
import { until } from '../../helpers/until.js';
import { json, startEngine, startGateway, suiteProcesses } from './procs.js';

const WORKER_ID = 7;
const BLOCK = 16;

/** pino's numeric level of `warn`. */
const WARN = 40;

describe('kvgate serve logs KV-event stream problems', () => {
  const procs = suiteProcesses('kvgate-serve-logs-');

  it("a gap in an engine's event stream writes a warn line naming the worker", async () => {
    const engine = await startEngine(procs, ['--seed', '3']);
    // No replay endpoint: a gap cannot be repaired, so the slot is cleared and that is worth a warning.
    const url = await startGateway(procs, {
      name: engine.model,
      block_size: BLOCK,
      workers: [{ id: WORKER_ID, url: engine.url, kv_events: (engine.kv_events as string[])[0] }],
    });

    let n = 0;
    const complete = async (): Promise<void> => {
      // A fresh prompt of several full blocks: the engine stores new blocks and publishes a batch.
      const words = Array.from({ length: 6 * BLOCK }, (_, i) => `w${n}x${i}`).join(' ');
      n++;
      const res = await fetch(`${url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: engine.model, prompt: words, max_tokens: 1 }),
      });
      expect(res.status).toBe(200);
      await res.arrayBuffer();
    };
    const gapWarning = (): Record<string, unknown> | undefined =>
      procs
        .gateway!.lines.map(json)
        .find((o) => o !== undefined && o.level === WARN && o.workerId === WORKER_ID && /gap/i.test(String(o.msg)));

    // The subscription may join late (ZMQ slow joiner), so repeat: a batch the gateway sees, one
    // dropped on the wire, and the next one reveals the gap.
    await until(
      async () => {
        await complete();
        const faults = await fetch(`${engine.url}/admin/faults`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ drop_next_event_batches: 1 }),
        });
        expect(faults.status).toBe(200);
        await faults.arrayBuffer();
        await complete();
        await complete();
        return gapWarning() !== undefined;
      },
      'a warn line about the KV-event gap of the worker',
      20_000,
    );

    const line = gapWarning()!;
    expect(line).toMatchObject({ level: WARN, workerId: WORKER_ID, dpRank: 0 });
    expect(String(line.msg)).toMatch(/KV event gap/);
  }, 60_000);
});
