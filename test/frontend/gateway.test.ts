import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { DEMO_ENGINES, DEMO_MODEL } from '../../src/cli/demo.js';
import { serve } from '../../src/cli/serve.js';
import { loadGatewayConfig } from '../../src/config/index.js';
import { KvgateError, isKvgateError } from '../../src/errors/index.js';
import { startGateway } from '../../src/frontend/gateway.js';
import type { ModelConfig } from '../../src/config/index.js';
import { FakeRouter } from './fake-router.js';

const silent = pino({ level: 'silent' });

describe('gateway assembly', () => {
  it('startGateway builds one router per model from the factory and closes them after draining', async () => {
    const config = loadGatewayConfig({
      base: {
        listen: { port: 0 },
        preprocess: { threads: 0 },
        router: { use_kv_events: false },
        models: [{ name: 'm', tokenizer: 'none', block_size: 8, workers: [{ id: 1, url: 'http://127.0.0.1:9' }] }],
      },
      env: {},
    });
    const seen: ModelConfig[] = [];
    let router: FakeRouter | undefined;
    const g = await startGateway({
      config,
      logger: silent,
      createRouter: (model) => {
        seen.push(model);
        router = new FakeRouter({
          model: model.name,
          blockSize: model.blockSize,
          workerIds: model.workers.map((w) => w.id),
        });
        return router;
      },
    });
    expect(seen.map((m) => [m.name, m.blockSize])).toEqual([['m', 8]]);
    const r = await fetch(`http://127.0.0.1:${g.addresses.public.port}/v1/completions`, {
      method: 'POST',
      body: JSON.stringify({ model: 'm', prompt: 'hello' }),
    });
    expect(r.status).toBe(200);
    expect(r.headers.get('x-kvgate-worker')).toBe('1');
    await g.close();
    expect(router!.closed).toBe(true);
  });

  it('a failing router factory stops startup and leaves nothing running', async () => {
    const config = loadGatewayConfig({
      base: {
        listen: { port: 0 },
        preprocess: { threads: 0 },
        router: { use_kv_events: false },
        models: [{ name: 'm', tokenizer: 'none', workers: [{ id: 1, url: 'http://127.0.0.1:9' }] }],
      },
      env: {},
    });
    const err = await startGateway({
      config,
      logger: silent,
      createRouter: () => {
        throw new KvgateError('KVG_ERR_INVALID_CONFIG', 'no such worker pool');
      },
    }).catch((e: unknown) => e);
    expect(isKvgateError(err, 'KVG_ERR_INVALID_CONFIG')).toBe(true);
  });
});

describe('kvgate serve', () => {
  it('with no model configured, starts the embedded demo: four simulated engines with KV events, the demo tokenizer, a curl to try', async () => {
    let banner = '';
    const routers: FakeRouter[] = [];
    const h = await serve(['--port', '0', '--preprocess-threads', '0', '--log-level', 'silent'], {
      env: {},
      logger: silent,
      out: { write: (t: string) => (banner += t) },
      routers: () => ({
        createRouter: (model) => {
          const r = new FakeRouter({
            model: model.name,
            blockSize: model.blockSize,
            workerIds: model.workers.map((w) => w.id),
          });
          routers.push(r);
          return r;
        },
        close: async () => undefined,
      }),
    });
    try {
      expect(h).toBeDefined();
      const { gateway, mockers } = h!;
      expect(mockers.length).toBe(DEMO_ENGINES);
      const model = gateway.config.models[0]!;
      expect(model).toMatchObject({ name: DEMO_MODEL, routerMode: 'kv', blockSize: 16, tokenizer: { kind: 'demo' } });
      expect(model.router.useKvEvents).toBe(true);
      expect(model.workers.map((w) => w.url)).toEqual(mockers.map((m) => m.url));
      expect(model.workers.every((w) => w.kvEvents?.endpoint.startsWith('tcp://127.0.0.1:'))).toBe(true);
      const url = `http://127.0.0.1:${gateway.addresses.public.port}`;
      expect(banner).toContain(`curl -si ${url}/v1/chat/completions`);
      expect(banner).toContain(`"model": "${DEMO_MODEL}"`);
      const models = (await (await fetch(`${url}/v1/models`)).json()) as { data: { id: string }[] };
      expect(models.data.map((m) => m.id)).toEqual([DEMO_MODEL]);
      // The engines are real: they answer on their own URLs.
      expect((await fetch(`${mockers[0]!.url}/health`)).status).toBe(200);
    } finally {
      await h?.stop();
    }
    await expect(fetch(`${h!.mockers[0]!.url}/health`)).rejects.toThrow();
    expect(routers[0]!.closed).toBe(true);
  });

  it('refuses to start on a config error, naming the flag, and prints help', async () => {
    const err = await serve(['--port', 'eighty'], { env: {}, logger: silent, out: { write: () => undefined } }).catch(
      (e: unknown) => e,
    );
    expect(isKvgateError(err, 'KVG_ERR_INVALID_CONFIG')).toBe(true);
    expect((err as Error).message).toContain('--port: listen.port: must be an integer');
    let help = '';
    expect(await serve(['--help'], { env: {}, out: { write: (t: string) => (help += t) } })).toBeUndefined();
    expect(help).toContain('usage: kvgate serve');
    expect(help).toContain('--router-temperature');
  });
});

describe('kvgate serve: the embedded demo end to end', () => {
  it('serves chat through real routers and engines; a conversation sticks to the engine holding its prefix', async () => {
    const h = await serve(['--port', '0', '--preprocess-threads', '0', '--log-level', 'silent'], {
      env: {},
      logger: silent,
      out: { write: () => undefined },
    });
    try {
      const url = `http://127.0.0.1:${h!.gateway.addresses.public.port}`;
      const ask = async (
        messages: { role: string; content: string }[],
      ): Promise<{ worker: string | null; text: string; cached: number }> => {
        const r = await fetch(`${url}/v1/chat/completions`, {
          method: 'POST',
          body: JSON.stringify({ model: DEMO_MODEL, messages, max_tokens: 4 }),
        });
        expect(r.status).toBe(200);
        const body = (await r.json()) as {
          choices: { message: { content: string } }[];
          usage: { prompt_tokens_details?: { cached_tokens?: number } };
        };
        return {
          worker: r.headers.get('x-kvgate-worker'),
          text: body.choices[0]!.message.content,
          cached: body.usage.prompt_tokens_details?.cached_tokens ?? 0,
        };
      };
      const history = [
        { role: 'system', content: 'You are a patient teacher. '.repeat(30) },
        { role: 'user', content: 'Explain KV caches in one sentence.' },
      ];
      const first = await ask(history);
      expect(first.worker).toMatch(/^[1-4]$/);
      // Wait until the engine's KV events have reached the index (query-only routing shows the overlap).
      const deadline = Date.now() + 10_000;
      for (;;) {
        const q = (await (
          await fetch(`${url}/v1/route`, {
            method: 'POST',
            body: JSON.stringify({ model: DEMO_MODEL, messages: history }),
          })
        ).json()) as { overlap_blocks: number };
        if (q.overlap_blocks > 0) break;
        if (Date.now() > deadline) throw new Error('KV events never reached the router');
        await new Promise((r) => setTimeout(r, 20));
      }
      const second = await ask([
        ...history,
        { role: 'assistant', content: first.text },
        { role: 'user', content: 'And why does prefix reuse matter?' },
      ]);
      expect(second.worker).toBe(first.worker);
      expect(second.cached).toBeGreaterThan(0);
    } finally {
      await h?.stop();
    }
  });
});
