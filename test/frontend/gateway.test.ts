import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { DEMO_ENGINES, DEMO_MODEL, serve } from '../../src/cli/serve.js';
import { loadGatewayConfig } from '../../src/config/index.js';
import { KvgateError, isKvgateError } from '../../src/errors/index.js';
import { startGateway } from '../../src/frontend/gateway.js';
import type { ModelConfig } from '../../src/config/index.js';
import { FakeRouter } from './fake-router.js';

const silent = pino({ level: 'silent' });

describe('gateway assembly', () => {
  it('startGateway builds one router per model from the factory and closes them after draining', async () => {
    const config = loadGatewayConfig({
      base: { listen: { port: 0 }, preprocess: { threads: 0 }, router: { use_kv_events: false }, models: [{ name: 'm', tokenizer: 'none', block_size: 8, workers: [{ id: 1, url: 'http://127.0.0.1:9' }] }] },
      env: {},
    });
    const seen: ModelConfig[] = [];
    let router: FakeRouter | undefined;
    const g = await startGateway({
      config, logger: silent,
      createRouter: (model) => {
        seen.push(model);
        router = new FakeRouter({ model: model.name, blockSize: model.blockSize, workerIds: model.workers.map((w) => w.id) });
        return router;
      },
    });
    expect(seen.map((m) => [m.name, m.blockSize])).toEqual([['m', 8]]);
    const r = await fetch(`http://127.0.0.1:${g.addresses.public.port}/v1/completions`, { method: 'POST', body: JSON.stringify({ model: 'm', prompt: 'hello' }) });
    expect(r.status).toBe(200);
    expect(r.headers.get('x-kvgate-worker')).toBe('1');
    await g.close();
    expect(router!.closed).toBe(true);
  });

  it('a failing router factory stops startup and leaves nothing running', async () => {
    const config = loadGatewayConfig({
      base: { listen: { port: 0 }, preprocess: { threads: 0 }, router: { use_kv_events: false }, models: [{ name: 'm', tokenizer: 'none', workers: [{ id: 1, url: 'http://127.0.0.1:9' }] }] },
      env: {},
    });
    const err = await startGateway({ config, logger: silent, createRouter: () => { throw new KvgateError('KVG_ERR_INVALID_CONFIG', 'no such worker pool'); } }).catch((e: unknown) => e);
    expect(isKvgateError(err, 'KVG_ERR_INVALID_CONFIG')).toBe(true);
  });
});

describe('kvgate serve', () => {
  it('with no model configured, starts the embedded demo: four simulated engines with KV events, the demo tokenizer, a curl to try', async () => {
    let banner = '';
    const routers: FakeRouter[] = [];
    const h = await serve(['--port', '0', '--preprocess-threads', '0', '--log-level', 'silent'], {
      env: {}, logger: silent, out: { write: (t: string) => (banner += t) },
      createRouter: (model) => {
        const r = new FakeRouter({ model: model.name, blockSize: model.blockSize, workerIds: model.workers.map((w) => w.id) });
        routers.push(r);
        return r;
      },
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
    const err = await serve(['--port', 'eighty'], { env: {}, logger: silent, out: { write: () => undefined }, createRouter: () => { throw new Error('not reached'); } }).catch((e: unknown) => e);
    expect(isKvgateError(err, 'KVG_ERR_INVALID_CONFIG')).toBe(true);
    expect((err as Error).message).toContain('--port: listen.port: must be an integer');
    let help = '';
    expect(await serve(['--help'], { env: {}, out: { write: (t: string) => (help += t) }, createRouter: () => { throw new Error('not reached'); } })).toBeUndefined();
    expect(help).toContain('usage: kvgate serve');
    expect(help).toContain('--router-temperature');
  });
});
