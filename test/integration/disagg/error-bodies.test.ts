/**
 * What an HTTP client of a disaggregated model reads when a request fails:
 * the stable code and status of each cause, and never an engine's address
 * (the prefill and decode engines' URLs, their bootstrap endpoints) nor the
 * engine's own error text. Through the real HTTP frontend.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { MODEL, startDisaggFleet, type DisaggFleet, type DisaggFleetOptions } from './fleet.js';
import { startGateway, type TestGateway } from './gateway.js';

const open: { f: DisaggFleet; gw: TestGateway }[] = [];
afterEach(async () => {
  for (const { f, gw } of open.splice(0)) {
    for (const m of [...f.prefill, ...f.decode]) m.setFaults({ hang: false });
    await gw.close();
    await f.close();
  }
});

async function setup(opts: DisaggFleetOptions): Promise<{ f: DisaggFleet; gw: TestGateway }> {
  const f = await startDisaggFleet({ prefill: 1, decode: 1, ...opts });
  const gw = await startGateway(f.router, [...f.prefillWorkers, ...f.decodeWorkers], f.metrics);
  const s = { f, gw };
  open.push(s);
  return s;
}

/** Every address a client must not see: the engines' URLs, hosts:ports and bootstrap endpoints. */
function addresses(f: DisaggFleet): string[] {
  const out: string[] = [];
  for (const w of [...f.prefillWorkers, ...f.decodeWorkers]) {
    const u = new URL(w.url);
    out.push(w.url, u.host, `:${u.port}`);
    if (w.bootstrap !== undefined) out.push(`:${w.bootstrap.port}`);
  }
  return out;
}

async function post(gw: TestGateway, stream: boolean): Promise<{ status: number; text: string }> {
  const res = await fetch(`${gw.url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL, prompt: 'Where does the KV go after the prefill?', max_tokens: 4, stream }),
  });
  return { status: res.status, text: await res.text() };
}

/** The error object of an answer: the JSON body, or the stream's error event. */
function errorOf(text: string): { code: string; message: string } {
  const json = text.trimStart().startsWith('{')
    ? text
    : text
        .split('\n\n')
        .find((e) => e.includes('"error"'))!
        .replace(/^data: /, '');
  return (JSON.parse(json) as { error: { code: string; message: string } }).error;
}

const CASES: {
  name: string;
  opts: DisaggFleetOptions;
  arrange?: (f: DisaggFleet) => void;
  status: number;
  code: string;
}[] = [
  {
    name: 'vLLM prefill engine 5xx',
    opts: { engine: 'vllm', prefillMocker: { faults: { errorRate: 1 } } },
    status: 502,
    code: 'KVG_ERR_PREFILL_FAILED',
  },
  {
    name: 'SGLang prefill engine 5xx',
    opts: { engine: 'sglang', prefillMocker: { faults: { errorRate: 1 } } },
    status: 502,
    code: 'KVG_ERR_PREFILL_FAILED',
  },
  {
    name: 'vLLM prefill without kv_transfer_params',
    opts: { engine: 'vllm', prefillMocker: { engine: 'sglang', mode: 'aggregated' } },
    status: 502,
    code: 'KVG_ERR_NO_DISAGGREGATED_PARAMS',
  },
  {
    name: 'SGLang rendezvous timeout (decode hung)',
    opts: { engine: 'sglang', prefillMocker: { bootstrapTimeoutMs: 300 } },
    arrange: (f) => f.decode[0]!.setFaults({ hang: true }),
    status: 502,
    code: 'KVG_ERR_PREFILL_FAILED',
  },
  {
    name: 'vLLM decode never starts (first-byte deadline)',
    opts: { engine: 'vllm', router: { legTimeouts: { firstByteMs: 500 } } },
    arrange: (f) => f.decode[0]!.setFaults({ hang: true }),
    status: 504,
    code: 'KVG_ERR_ENGINE_FIRST_BYTE_TIMEOUT',
  },
];

describe('P/D failures through the HTTP frontend: stable codes, no engine address', () => {
  for (const c of CASES) {
    for (const stream of [false, true]) {
      it(`${c.name}, ${stream ? 'streaming' : 'not streaming'}: ${c.status} ${c.code}`, async () => {
        const { f, gw } = await setup(c.opts);
        c.arrange?.(f);
        const { status, text } = await post(gw, stream);
        for (const a of addresses(f)) expect(text, a).not.toContain(a);
        expect(text).not.toContain('http://');
        const error = errorOf(text);
        expect(error.code).toBe(c.code);
        expect(status).toBe(c.status);
        expect(error.message).toMatch(/worker \d+/);
      });
    }
  }
});
