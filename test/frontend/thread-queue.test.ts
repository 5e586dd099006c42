/**
 * A preprocessing thread's queue (preprocess/thread-queue.ts) and what the
 * gateway does with it: a request whose client leaves keeps its concurrency
 * slot while its task runs on a thread, and its task still waiting for the
 * thread is dropped (counted in kvgate_preprocess_tasks_cancelled_total) with
 * the body it holds, so abandoned requests neither free the limit for more
 * nor leave work queued in front of the next client's.
 */
import { connect, type Socket } from 'node:net';
import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { Cancellation } from '../../src/common/index.js';
import { loadGatewayConfig, type GatewayConfig } from '../../src/config/index.js';
import { isKvgateError } from '../../src/errors/index.js';
import type { BodyOutcome, TaskReply, WorkerTask } from '../../src/frontend/preprocess/protocol.js';
import { ThreadQueue } from '../../src/frontend/preprocess/thread-queue.js';
import { FakeRouter } from './fake-router.js';
import { post, startPoolGateway, type PoolGateway } from './server-harness.js';

const PING: WorkerTask = { kind: 'ping' };

/** A queue of `slots` over a run whose tasks end only when the test says so. */
function heldQueue(slots: number, bound: number) {
  const started: (() => void)[] = [];
  const cancelled: string[] = [];
  const queue = new ThreadQueue({
    run: () => new Promise<TaskReply>((resolve) => started.push(() => resolve({ ok: true, pong: true }))),
    slots,
    bound: () => bound,
    onCancelled: (task) => cancelled.push(task.kind),
  });
  return { queue, started, cancelled };
}

describe('a thread queue', () => {
  it('runs `slots` tasks at once and the rest in arrival order as slots free up', async () => {
    const { queue, started } = heldQueue(2, 10);
    const order: number[] = [];
    const runs = [0, 1, 2, 3].map((i) => queue.submit(PING, undefined).then(() => order.push(i)));
    expect(started.length).toBe(2);
    expect(queue.waiting).toBe(2);
    started[1]!();
    await runs[1];
    expect(started.length).toBe(3);
    for (const end of started.slice(0)) end();
    await new Promise((r) => setImmediate(r));
    started[3]!();
    await Promise.all(runs);
    expect(order).toEqual([1, 0, 2, 3]);
  });

  it("drops a waiting task when its signal fires, with the signal's reason; a running one runs on", async () => {
    const { queue, started, cancelled } = heldQueue(1, 10);
    const running = new Cancellation();
    const waiting = new Cancellation();
    const first = queue.submit(PING, undefined, running);
    const second = queue.submit({ kind: 'decode', model: 'demo', tokenIds: [1] }, undefined, waiting);
    const third = queue.submit(PING, undefined);
    running.abort(new Error('first left'));
    waiting.abort(new Error('second left'));
    await expect(second).rejects.toThrow('second left');
    expect(cancelled).toEqual(['decode']);
    expect(queue.waiting).toBe(1);
    // The running task is not cut: it ends as it would have, and the next waiting one starts.
    started[0]!();
    await expect(first).resolves.toEqual({ ok: true, pong: true });
    expect(started.length).toBe(2);
    started[1]!();
    await expect(third).resolves.toEqual({ ok: true, pong: true });
    // A task whose signal already fired never waits.
    await expect(queue.submit(PING, undefined, running)).rejects.toThrow('first left');
    expect(cancelled).toEqual(['decode', 'ping']);
  });

  it('refuses a task with KVG_ERR_TOO_MANY_REQUESTS when `bound` tasks already wait', async () => {
    const { queue, started } = heldQueue(1, 2);
    const held = [queue.submit(PING, undefined), queue.submit(PING, undefined), queue.submit(PING, undefined)];
    const refused = await queue.submit(PING, undefined).catch((e: unknown) => e);
    expect(isKvgateError(refused, 'KVG_ERR_TOO_MANY_REQUESTS')).toBe(true);
    expect((refused as Error).message).toContain('2 preprocessing tasks already wait');
    for (let i = 0; i < 3; i++) {
      started[i]!();
      await held[i];
    }
  });

  it("gives freed slots to the owners in turn: one owner's flood delays another's task by one of its tasks", async () => {
    const { queue, started } = heldQueue(1, 100);
    const order: string[] = [];
    const submit = (owner: string, i: number): Promise<unknown> =>
      queue.submit(PING, undefined, undefined, owner).then(() => order.push(`${owner}${i}`));
    const all = Array.from({ length: 10 }, (_, i) => submit('a', i));
    all.push(submit('b', 0), submit('b', 1), submit('c', 0));
    for (let i = 0; i < all.length; i++) {
      started[i]!();
      await new Promise((r) => setImmediate(r));
    }
    await Promise.all(all);
    expect(order.slice(0, 6)).toEqual(['a0', 'a1', 'b0', 'c0', 'a2', 'b1']);
    expect(order.slice(6)).toEqual(['a3', 'a4', 'a5', 'a6', 'a7', 'a8', 'a9']);
  });

  it("a cancelled task leaves its owner's turn to the next of its tasks, and an owner with none left its turn", async () => {
    const { queue, started, cancelled } = heldQueue(1, 100);
    const order: string[] = [];
    const left = new Cancellation();
    const submit = (owner: string, i: number, signal?: Cancellation['signal']): Promise<unknown> =>
      queue.submit(PING, undefined, signal, owner).then(
        () => order.push(`${owner}${i}`),
        () => order.push(`${owner}${i} dropped`),
      );
    const all = [submit('a', 0), submit('b', 0, left.signal), submit('a', 1), submit('c', 0)];
    left.abort(new Error('b left'));
    await new Promise((r) => setImmediate(r));
    for (let i = 0; i < 3; i++) {
      started[i]!();
      await new Promise((r) => setImmediate(r));
    }
    await Promise.all(all);
    expect(order).toEqual(['b0 dropped', 'a0', 'a1', 'c0']);
    expect(cancelled).toEqual(['ping']);
    expect(queue.waiting).toBe(0);
  });
});

function config(maxConcurrent: number): GatewayConfig {
  return loadGatewayConfig({
    base: {
      listen: { port: 0 },
      router: { use_kv_events: false },
      limits: { max_body_bytes: 4 * 1024 * 1024, max_prompt_tokens: 120_000, max_concurrent_requests: maxConcurrent },
      log: { level: 'silent' },
      models: [{ name: 'demo', tokenizer: 'demo', workers: [{ id: 1, url: 'http://127.0.0.1:1' }] }],
    },
    env: {},
  });
}

/** A chat of about 100k tokens of random text: a task of tens to hundreds of milliseconds on a thread. */
const bigChat = (): string =>
  JSON.stringify({ model: 'demo', messages: [{ role: 'user', content: randomBytes(75_000).toString('base64') }] });

/** Sends a whole request on a socket of its own; the test destroys the socket (the client leaves). */
function send(url: string, body: string): Promise<Socket> {
  const u = new URL(url);
  return new Promise((resolve, reject) => {
    const s = connect(Number(u.port), u.hostname, () => {
      s.write(
        'POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n' +
          `content-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
      );
      resolve(s);
    });
    s.on('error', reject);
  });
}

/** Counts the body tasks the gateway has handed its preprocessor and those not settled yet. */
function watchBodies(g: PoolGateway): { calls: number; pending: number } {
  const seen = { calls: 0, pending: 0 };
  const runBody = g.pre.runBody.bind(g.pre);
  g.pre.runBody = (task, signal): Promise<BodyOutcome> => {
    seen.calls++;
    seen.pending++;
    return runBody(task, signal).finally(() => seen.pending--);
  };
  return seen;
}

async function until(cond: () => boolean, what: string): Promise<void> {
  const deadline = performance.now() + 20_000;
  while (!cond()) {
    if (performance.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 2));
  }
}

async function cancelledTasks(g: PoolGateway): Promise<number> {
  const m = await g.server.metrics.preprocessTasksCancelled.get();
  return m.values.filter((v) => v.labels.task === 'body').reduce((n, v) => n + v.value, 0);
}

/** Requests whose response has closed (the server counts each in kvgate_http_requests_total as it closes). */
async function closedRequests(g: PoolGateway): Promise<number> {
  const m = await g.server.metrics.httpRequests.get();
  return m.values.reduce((n, v) => n + v.value, 0);
}

async function untilAsync(cond: () => Promise<boolean>, what: string): Promise<void> {
  const deadline = performance.now() + 20_000;
  while (!(await cond())) {
    if (performance.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 2));
  }
}

describe('requests whose clients leave while their bodies are preprocessed on a thread', () => {
  it('keep their slots while their tasks run; their waiting tasks are dropped and counted', async () => {
    const g = await startPoolGateway(config(64), new FakeRouter({ model: 'demo', workerIds: [1] }), {
      threads: 1,
      inlineMaxBodyBytes: -1,
    });
    try {
      const bodies = watchBodies(g);
      const n = 16;
      const sockets = await Promise.all(Array.from({ length: n }, () => send(g.url, bigChat())));
      await until(() => bodies.calls === n, 'every body to reach the preprocessor');
      const pendingWhenLeft = bodies.pending;
      for (const s of sockets) s.destroy();
      await untilAsync(async () => (await closedRequests(g)) === n, 'the server to see every client leave');
      // A slot is held for as long as its request's task is on the thread, though its client is gone.
      expect(g.server.inflight).toBeGreaterThanOrEqual(bodies.pending);
      // Of the tasks not done when the clients left, at most the thread's four running ones were not dropped.
      expect(await cancelledTasks(g)).toBeGreaterThanOrEqual(pendingWhenLeft - 4);
      expect(pendingWhenLeft).toBeGreaterThan(4);
      await until(() => g.server.inflight === 0, 'the running tasks to end');
      expect(bodies.pending).toBe(0);
      const small = await post(`${g.url}/v1/chat/completions`, {
        model: 'demo',
        messages: [{ role: 'user', content: 'hi' }],
      });
      expect(small.status).toBe(200);
    } finally {
      await g.close();
    }
  }, 60_000);

  it('count against max_concurrent_requests until their tasks end: the next request gets the 429', async () => {
    const g = await startPoolGateway(config(2), new FakeRouter({ model: 'demo', workerIds: [1] }), {
      threads: 1,
      inlineMaxBodyBytes: -1,
    });
    try {
      const bodies = watchBodies(g);
      const sockets = await Promise.all([send(g.url, bigChat()), send(g.url, bigChat())]);
      await until(() => bodies.calls === 2, 'both bodies to reach the preprocessor');
      for (const s of sockets) s.destroy();
      const chat = { model: 'demo', messages: [{ role: 'user', content: 'hi' }] };
      // Tasks of tens of milliseconds or more each: they still run as the next request comes, a moment later.
      const running = bodies.pending;
      const refused = await post(`${g.url}/v1/chat/completions`, chat);
      expect(running).toBeGreaterThan(0);
      expect(refused.status).toBe(429);
      expect(refused.json.error.code).toBe('KVG_ERR_TOO_MANY_REQUESTS');
      await until(() => bodies.pending === 0 && g.server.inflight === 0, 'the abandoned tasks to end');
      expect((await post(`${g.url}/v1/chat/completions`, chat)).status).toBe(200);
    } finally {
      await g.close();
    }
  }, 60_000);
});
