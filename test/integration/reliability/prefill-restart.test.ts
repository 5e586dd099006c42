/**
 * Issue 23, section 2, item 3: an SGLang prefill engine killed (-9) and
 * restarted on its ports is routable again within about one probe interval
 * (`health.interval_ms`, 2 s by default). Real processes: `kvgate mocker`
 * engines (SGLang-style, bootstrap handoff) behind `kvgate serve` with the
 * default health probing. Requests keep coming while the engine is gone, so
 * the outlier detector sees its connection failures and ejects it; before the
 * fix that ejection (30 s) outlived the crash: the engine was routable again
 * about 29 s after its restart (23 s in the report, restarted later). Now a passing probe ends an ejection earned by
 * connection failures alone, and a pool's only worker is never taken out of
 * routing (the pool's panic threshold).
 */
import { afterAll, describe, expect, it } from 'vitest';
import { metric } from '../../helpers/metric-sum.js';
import {
  serveConfigObject,
  startMockerEngine,
  stopServed,
  type ServedGateway,
  type ServedProc,
} from '../../helpers/serve-process.js';
import { until } from '../../helpers/until.js';

/** The default `health.interval_ms`: the bound is one of these plus the time to answer a probe under a loaded machine. */
const INTERVAL_MS = 2000;
const BOUND_MS = INTERVAL_MS + 2000;

interface Engine {
  proc: ServedProc;
  readonly url: string;
  readonly model: string;
  readonly ports: readonly string[];
}

const portOf = (u: unknown): string => new URL(String(u).replace('tcp://', 'http://')).port;

async function startEngine(mode: 'prefill' | 'decode', ports?: readonly string[]): Promise<Engine> {
  const fixed =
    ports === undefined ? [] : ['--port', ports[0]!, '--kv-events-port', ports[1]!, '--bootstrap-port', ports[2]!];
  const { proc, engine } = await startMockerEngine(['--engine', 'sglang', '--mode', mode, ...fixed]);
  const kv = (engine.kv_events as string[])[0];
  return {
    proc,
    url: String(engine.url),
    model: String(engine.model),
    ports: [portOf(engine.url), portOf(kv), String(engine.bootstrap_port)],
  };
}

describe('a prefill engine killed and restarted is routable again within about one probe interval', () => {
  const gateways: ServedGateway[] = [];
  const engines: Engine[] = [];
  let url = '';
  let sent = 0;

  /** Stops the gateway and the engines of a test. */
  async function stopAll(): Promise<void> {
    await Promise.all([
      ...gateways.splice(0).map((g) => g.stop()),
      ...engines.splice(0).map((e) => stopServed(e.proc)),
    ]);
  }

  afterAll(stopAll);

  async function gateway(prefill: Engine[], decode: Engine): Promise<void> {
    const served = await serveConfigObject({
      listen: { host: '127.0.0.1', port: 0 },
      preprocess: { threads: 0 },
      log: { level: 'info' },
      // Probing as by default (every 2 s, out after 2 failures). Two connection failures eject: no more than
      // unhealthy_after, so the detector ejects before a second failed probe could, whatever the timing.
      health: { outlier_detection: { consecutive_errors: 2 } },
      models: [
        {
          name: decode.model,
          block_size: 16,
          router_mode: 'round-robin',
          engine: 'sglang',
          workers: [
            ...prefill.map((e, i) => ({ id: i + 1, url: e.url, role: 'prefill', bootstrap_port: Number(e.ports[2]) })),
            { id: 9, url: decode.url, role: 'decode' },
          ],
        },
      ],
    });
    gateways.push(served);
    url = served.url;
  }

  /** One small completion; resolves with its status and the prefill worker that served it. */
  async function complete(): Promise<{ status: number; prefill: string | null }> {
    const res = await fetch(`${url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        model: engines[0]!.model,
        prompt: `request ${sent++} of the restart test`,
        max_tokens: 2,
      }),
    });
    await res.arrayBuffer();
    return { status: res.status, prefill: res.headers.get('x-kvgate-prefill-worker') };
  }

  /**
   * Kills the engine of prefill worker `id` (-9), then sends bursts of `burst` requests at once, as a busy gateway
   * does, until the outlier detector has ejected the worker for their connection failures (the first burst does).
   */
  async function crashUnderLoad(e: Engine, id: number, burst: number): Promise<void> {
    const exited = new Promise((r) => e.proc.child.once('exit', r));
    e.proc.child.kill('SIGKILL');
    await exited;
    await until(
      async () => {
        await Promise.all(Array.from({ length: burst }, () => complete()));
        return (
          (await metric(url, 'kvgate_worker_ejections_total', {
            worker_id: String(id),
            reason: 'consecutive_errors',
          })) > 0
        );
      },
      `worker ${id} ejected for its connection failures`,
      20_000,
    );
  }

  /** Restarts the engine on its ports and measures how long until a request is prefilled on worker `id` again. */
  async function readmittedAfter(e: Engine, id: number): Promise<number> {
    e.proc = (await startEngine('prefill', e.ports)).proc;
    const t0 = performance.now();
    await until(
      async () => {
        const r = await complete();
        return r.status === 200 && r.prefill === String(id);
      },
      `a request prefilled on worker ${id} again`,
      40_000,
    );
    return performance.now() - t0;
  }

  it('the sole prefill engine of a model', async () => {
    const [prefill, decode] = await Promise.all([startEngine('prefill'), startEngine('decode')]);
    engines.push(prefill!, decode!);
    await gateway([prefill!], decode!);
    expect(await complete()).toEqual({ status: 200, prefill: '1' });
    await crashUnderLoad(prefill!, 1, 8);
    const ms = await readmittedAfter(prefill!, 1);
    console.info(JSON.stringify({ soleWorkerRoutableAfterRestartMs: Math.round(ms) }));
    expect(ms).toBeLessThan(BOUND_MS);
    await stopAll();
  }, 90_000);

  it('one prefill engine of two', async () => {
    const started = await Promise.all([startEngine('prefill'), startEngine('prefill'), startEngine('decode')]);
    engines.push(...started);
    const [a, b, decode] = started;
    await gateway([a!, b!], decode!);
    await until(async () => (await complete()).prefill === '1', 'a request prefilled on worker 1');
    await crashUnderLoad(a!, 1, 16);
    // Meanwhile the other prefill engine serves every request.
    expect(await complete()).toEqual({ status: 200, prefill: '2' });
    const ms = await readmittedAfter(a!, 1);
    console.info(JSON.stringify({ workerOfTwoRoutableAfterRestartMs: Math.round(ms) }));
    expect(ms).toBeLessThan(BOUND_MS);
  }, 90_000);
});
