/**
 * An ingestion thread that fails while its ZMQ sockets receive, through `kvgate serve` as an operator runs it:
 * two mocker engines publish KV events over ZMQ (with replay buffers) to one ingestion thread, which holds
 * both SUB sockets. The gateway's thread is made to fail for real (the test hook
 * `KVGATE_TEST_INGEST_THREAD_FAILURE`: its first thread throws from a timer, an uncaught exception, after it
 * posted batches that many times; the thread that replaces it is not armed). Before, zeromq aborted the whole
 * gateway (`terminate called after throwing an instance of 'Napi::Error'`, exit 134: zeromq.js issue #411).
 * Now the thread closes its sockets, says what failed (one error line with its error) and ends; it is
 * restarted (counted in `kvgate_kv_event_ingest_thread_restarts_total{reason}`), both streams subscribe
 * again (each connects again), what was lost is replayed, and new blocks of both engines reach the index.
 * A second shutdown signal during the drain, with a thread's socket open, exits with 130 (not zeromq's abort).
 *
 * Runs the compiled CLI (bin/kvgate.js -> dist/), as `npm test` builds it first.
 */
import { describe, expect, it } from 'vitest';
import { seededRng } from '../../../src/common/index.js';
import { metric } from '../../helpers/metric-sum.js';
import { until } from '../../helpers/until.js';
import { json, postOk, promptTraffic, startEngine, startGateway, suiteProcesses, workerOf } from './procs.js';

const BLOCK = 16;
const PROMPT_BLOCKS = 4;
/** The thread fails after posting batches this many times: a few prompts in. */
const FAIL_AFTER_POSTS = 4;
/** pino's numeric level of `error`. */
const ERROR = 50;
const ENGINE_ARGS = ['--kv-events-replay-port', '0', '--num-gpu-blocks', '200000'];

describe('a KV-event ingestion thread that fails while its sockets receive', () => {
  const procs = suiteProcesses('kvgate-ingest-failure-');

  it('is restarted with its streams; the gateway lives on and the index follows both engines again', async () => {
    const engines = [
      await startEngine(procs, ['--seed', '7', ...ENGINE_ARGS]),
      await startEngine(procs, ['--seed', '8', ...ENGINE_ARGS]),
    ];
    const model = String(engines[0]!.model);
    process.env.KVGATE_TEST_INGEST_THREAD_FAILURE = String(FAIL_AFTER_POSTS);
    let url: string;
    try {
      url = await startGateway(
        procs,
        { name: model, block_size: BLOCK, workers: engines.map((e, i) => workerOf(i + 1, e)) },
        { kv_events: { ingest_threads: 1 } },
      );
    } finally {
      delete process.env.KVGATE_TEST_INGEST_THREAD_FAILURE;
    }
    const gateway = procs.gateway!;
    const dead = (): boolean => gateway.child.exitCode !== null || gateway.child.signalCode !== null;
    const alive = (): void => {
      if (dead())
        throw new Error(
          `the gateway died (${gateway.child.exitCode ?? gateway.child.signalCode}): ${gateway.stderr.join('')}`,
        );
    };
    /** `step`, whose failure says so when it is the gateway's death (before the fix: SIGABRT, zeromq.js #411). */
    const living = async <T>(step: () => Promise<T>): Promise<T> => {
      try {
        return await step();
      } catch (err) {
        await until(dead, 'the gateway to exit', 2000).catch(() => undefined);
        alive();
        throw err;
      }
    };
    const rng = seededRng(31);
    const { prompts, overlap } = promptTraffic(url, model, { blocks: PROMPT_BLOCKS, blockSize: BLOCK, rng });
    /** A fresh prompt, pinned to worker `id` (so that both engines publish), remembered in `prompts`. */
    const complete = async (id: number): Promise<number[]> => {
      const prompt = Array.from({ length: PROMPT_BLOCKS * BLOCK + 1 }, () => 1000 + Math.floor(rng() * 50_000));
      await postOk(`${url}/v1/completions`, { model, prompt, max_tokens: 1, nvext: { backend_instance_id: id } });
      prompts.push(prompt);
      return prompt;
    };
    const restarts = (): Promise<number> => metric(url, 'kvgate_kv_event_ingest_thread_restarts_total');
    const reconnected = async (): Promise<boolean> => {
      for (const id of ['1', '2'])
        if ((await metric(url, 'kvgate_kv_event_connection_changes_total', { worker_id: id, change: 'connected' })) < 2)
          return false;
      return true;
    };

    // Both engines publish until the thread, holding both sockets, fails after its FAIL_AFTER_POSTS-th post.
    await until(
      () =>
        living(async () => {
          await complete(1);
          await complete(2);
          return (await restarts()) > 0;
        }),
      'the ingestion thread to fail and be restarted',
      30_000,
    );
    alive();
    const failed = gateway.lines
      .map(json)
      .filter((o) => o !== undefined && o.level === ERROR && String(o.msg).startsWith('KV-event ingestion thread'));
    expect(failed).toHaveLength(1);
    expect(failed[0]).toMatchObject({
      msg: expect.stringContaining('KV-event ingestion thread failed'),
      reason: 'uncaught_exception',
      err: expect.stringContaining('KVGATE_TEST_INGEST_THREAD_FAILURE'),
      stack: expect.stringContaining('Error: KVGATE_TEST_INGEST_THREAD_FAILURE'),
      thread: 0,
      streams: 2,
    });
    expect(await metric(url, 'kvgate_kv_event_ingest_thread_restarts_total', { reason: 'uncaught_exception' })).toBe(1);

    // Both streams subscribe again on the new thread: each socket connects again.
    await until(reconnected, 'both streams connected again on the restarted thread', 20_000);
    const restarted = gateway.lines
      .map(json)
      .find((o) => o?.msg === 'KV-event ingestion thread restarted; 2 stream(s) subscribing again');
    expect(restarted).toMatchObject({ thread: 0, reason: 'uncaught_exception', streams: 2 });
    // Each stream's lost connection is logged with its cause, not the usual guess.
    const lost = gateway.lines
      .map(json)
      .filter((o) => String(o?.msg).includes('KV event publisher disconnected'))
      .map((o) => String(o!.msg));
    expect(lost).toHaveLength(2);
    for (const msg of lost) expect(msg).toContain('(its ingestion thread restarted)');

    // Events flow again: new prompts on each engine reach the index in full, and what the dead thread had
    // not handed over comes back by replay (every prompt matched).
    const after = [await complete(1), await complete(2)];
    await until(
      async () => {
        alive();
        for (const p of after) if ((await overlap(p)) !== PROMPT_BLOCKS) return false;
        return true;
      },
      'new blocks of both engines in the index after the restart',
      20_000,
    );
    await until(
      async () => {
        for (const p of prompts) if ((await overlap(p)) !== PROMPT_BLOCKS) return false;
        return true;
      },
      'every prompt matched in full',
      30_000,
    );
    // The gauge is set each second: both workers' events live again.
    await until(
      async () =>
        (await metric(url, 'kvgate_worker_kv_events_live', { worker_id: '1' })) === 1 &&
        (await metric(url, 'kvgate_worker_kv_events_live', { worker_id: '2' })) === 1,
      "both workers' KV events live",
      10_000,
    );
    expect(await restarts()).toBe(1);
    alive();
    expect(gateway.stderr.join('')).not.toMatch(/terminate called|Napi::Error/);
  }, 120_000);

  it('a second shutdown signal during the drain exits with 130: the threads close their sockets first', async () => {
    // At real speed (not the suite's 100x), a long answer lasts well past the second signal.
    const engine = await startEngine(procs, [...ENGINE_ARGS, '--speedup', '1']);
    const model = String(engine.model);
    const url = await startGateway(
      procs,
      {
        name: model,
        block_size: BLOCK,
        workers: [workerOf(1, engine)],
      },
      { kv_events: { ingest_threads: 1 } },
    );
    const gateway = procs.gateway!;
    // A long answer in flight keeps the first signal's drain waiting.
    const body = JSON.stringify({ model, prompt: 'a long story', max_tokens: 5000, stream: true });
    const res = await fetch(`${url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body,
    });
    const reader = res.body!.getReader();
    await reader.read();
    gateway.child.kill('SIGINT');
    await until(
      () => gateway.lines.some((l) => json(l)?.msg === 'shutting down: draining in-flight requests'),
      'the drain to start',
    );
    gateway.child.kill('SIGINT');
    const code = await new Promise<number | null>((resolve) => {
      if (gateway.child.exitCode !== null || gateway.child.signalCode !== null) resolve(gateway.child.exitCode);
      else gateway.child.once('exit', (c) => resolve(c));
    });
    await reader.cancel().catch(() => undefined);
    // Before: process.exit with the thread's socket open aborted it (SIGABRT, 134; zeromq.js #411).
    expect({ code, signal: gateway.child.signalCode }).toEqual({ code: 130, signal: null });
  }, 60_000);
});
