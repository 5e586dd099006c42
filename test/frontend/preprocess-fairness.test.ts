/**
 * One tenant sending many slow prompts at once does not queue another's behind all of them: a preprocessing
 * thread's freed slots go to the waiting owners (declared tenants, else client addresses) in turn
 * (preprocess/thread-queue.ts), so the other tenant's request waits for about one of the flood's tasks.
 */
import { describe, expect, it, vi } from 'vitest';
import { FakeRouter } from './fake-router.js';
import { largeBodyConfig, post, startPoolGateway } from './server-harness.js';

/** The harness's agent-sized gateway, with two tenants of one class. */
function config() {
  return largeBodyConfig({
    tenants: {
      header: 'x-tenant',
      default_class: 'std',
      classes: [{ name: 'std' }],
      members: [
        { name: 'flood', class: 'std' },
        { name: 'calm', class: 'std' },
      ],
    },
  });
}

/** About 90k tokens of text no cache has seen (each conversation its own first message). */
function slowChat(i: number): Record<string, unknown> {
  const words = Array.from({ length: 18_000 }, (_, k) => `w${(k * 7919 + i * 104_729) % 100_003}`);
  return { model: 'demo', messages: [{ role: 'user', content: `${i} ${words.join(' ')}` }] };
}

describe('preprocessing under one tenant flood', () => {
  it("another tenant's request is served after about one of the flood's tasks, not after all of them", async () => {
    const g = await startPoolGateway(config(), new FakeRouter({ model: 'demo', workerIds: [1] }), { threads: 1 });
    try {
      const url = `${g.url}/v1/chat/completions`;
      const done: string[] = [];
      const flood = Array.from({ length: 24 }, (_, i) =>
        post(url, slowChat(i), { 'x-tenant': 'flood' }).then((r) => {
          expect(r.status, JSON.stringify(r.json)).toBe(200);
          done.push(`flood${i}`);
        }),
      );
      // The flood's first answer: the rest of it is on the thread's queue (four running, the others waiting).
      await Promise.race(flood);
      const calmChat = { model: 'demo', messages: [{ role: 'user', content: `calm ${'x y '.repeat(1500)}` }] };
      const calm = await post(url, calmChat, { 'x-tenant': 'calm' });
      expect(calm.status).toBe(200);
      done.push('calm');
      await Promise.all(flood);
      // Behind the four running and one more of the flood's tasks, never behind the whole flood.
      expect(done.indexOf('calm'), done.join(' ')).toBeLessThan(10);
    } finally {
      await g.close();
    }
  }, 120_000);
});

describe('the preprocessing queue behind a proxy', () => {
  it("each client a trusted proxy names is an owner of its own, as for the per-client bound; the proxy's own is not", async () => {
    // The per-client bound reads X-Forwarded-For from 127.0.0.1, the proxy the test's requests come through.
    const config = largeBodyConfig({
      limits: {
        max_body_bytes: 4 * 1024 * 1024,
        client_address: 'header:X-Forwarded-For',
        trusted_proxies: ['127.0.0.1'],
      },
    });
    const g = await startPoolGateway(config, new FakeRouter({ model: 'demo', workerIds: [1] }), { threads: 0 });
    try {
      const run = vi.spyOn(g.pre, 'run');
      const chatOf = (content: string) => ({ model: 'demo', messages: [{ role: 'user', content }] });
      const url = `${g.url}/v1/chat/completions`;
      expect((await post(url, chatOf('one'), { 'x-forwarded-for': '203.0.113.7' })).status).toBe(200);
      expect((await post(url, chatOf('two'), { 'x-forwarded-for': '198.51.100.9, 127.0.0.1' })).status).toBe(200);
      expect((await post(url, chatOf('three'))).status).toBe(200); // no header: the proxy's own, counted as a fallback
      expect(run.mock.calls.map((c) => c[2])).toEqual([
        'client:203.0.113.7',
        'client:198.51.100.9',
        'client:127.0.0.1',
      ]);
    } finally {
      await g.close();
    }
  });
});
