/**
 * One code per cause of a failed disaggregated request, on real engines: each
 * cause listed in docs/errors.md ("Disaggregated requests: one code per
 * cause") is produced here and must answer exactly the status and code the
 * table gives it, for both handoff protocols (issue 13 item 14).
 */
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { seededRng } from '../../../src/common/index.js';
import { isKvgateError } from '../../../src/errors/index.js';
import type { RoutedResponse } from '../../../src/frontend/router-port.js';
import {
  legsOf,
  poolsAtZero,
  prepare,
  randomTokens,
  startDisaggFleet,
  until,
  type DisaggFleet,
  type DisaggFleetOptions,
} from './fleet.js';

/** cause -> { status, code } as docs/errors.md lists them (`code` undefined: the engine's own answer). */
function documentedCauses(): Map<string, { status: string; code: string | undefined }> {
  const doc = readFileSync(new URL('../../../docs/errors.md', import.meta.url), 'utf8');
  const section = doc.split(/^## Disaggregated requests: one code per cause\s*$/m)[1]?.split(/^## /m)[0] ?? '';
  const out = new Map<string, { status: string; code: string | undefined }>();
  for (const m of section.matchAll(/^\| `([a-z-]+)` \|[^|]+\| ([^|]+?) \| ([^|]+?) \|\s*$/gm)) {
    const code = /`(KVG_ERR_[A-Z_]+)`/.exec(m[3]!)?.[1];
    out.set(m[1]!, { status: m[2]!.trim(), code });
  }
  return out;
}

const CAUSES = documentedCauses();
const rng = seededRng(1314);
const open: DisaggFleet[] = [];
afterEach(async () => {
  for (const f of open.splice(0)) {
    for (const m of [...f.prefill, ...f.decode]) m.setFaults({ hang: false });
    await f.close();
  }
});

async function fleet(opts: DisaggFleetOptions): Promise<DisaggFleet> {
  const f = await startDisaggFleet({ prefill: 1, decode: 1, ...opts });
  open.push(f);
  return f;
}

/** The request's outcome as the client would see it: the status and the kvgate code (undefined for an engine's own answer). */
async function outcome(
  p: Promise<RoutedResponse>,
): Promise<{ status: number; code: string | undefined; body?: unknown }> {
  try {
    const res = await p;
    const body = res.body.kind === 'json' ? JSON.parse(Buffer.from(res.body.bytes).toString('utf8')) : undefined;
    return { status: res.status, code: undefined, body };
  } catch (err) {
    if (!isKvgateError(err)) throw err;
    return { status: err.statusCode, code: err.code };
  }
}

function expectDocumented(cause: string, got: { status: number; code: string | undefined }): void {
  const doc = CAUSES.get(cause);
  expect(doc, `docs/errors.md lists cause ${cause}`).toBeDefined();
  expect(got.code).toBe(doc!.code);
  if (/^\d+$/.test(doc!.status)) expect(got.status).toBe(Number(doc!.status));
  else expect(got.status).toBeGreaterThanOrEqual(400); // the engine's own 4xx
}

describe('docs/errors.md: disaggregated causes', () => {
  it('lists the causes this suite pins, each with one status and code', () => {
    expect([...CAUSES.keys()].sort()).toEqual(
      [
        'decode-broke',
        'prefill-engine-error',
        'prefill-killed',
        'prefill-no-ticket',
        'prefill-refused',
        'rendezvous-failed',
      ].sort(),
    );
  });
});

for (const engine of ['vllm', 'sglang'] as const) {
  describe(`${engine}: one code per cause`, () => {
    it('prefill-refused: the prefill engine refuses the prompt (over its limit): its 4xx is passed through', async () => {
      const f = await fleet({ engine, prefillMocker: { maxModelLen: 64, bootstrapTimeoutMs: 20_000 } });
      const t0 = performance.now();
      const got = await outcome(f.router.route(prepare(randomTokens(rng, 80), { requestId: `refused-${engine}` })));
      expectDocumented('prefill-refused', got);
      expect(got.status).toBe(400);
      // Each engine's words (the mocker answers in the one it imitates).
      const said = engine === 'vllm' ? /context length is only 64 tokens/ : /model's context length \(64 tokens\)/;
      expect(JSON.stringify(got.body)).toMatch(said);
      // The SGLang decode half was cancelled, not left waiting for its rendezvous timeout.
      expect(performance.now() - t0).toBeLessThan(10_000);
      await until(() => f.prefill[0]!.stats().bootstrapPending === 0, 'the rendezvous table to empty');
      await poolsAtZero(f);
    });

    it('prefill-engine-error: the prefill engine answers 5xx', async () => {
      const f = await fleet({ engine, prefillMocker: { faults: { errorRate: 1 } } });
      expectDocumented('prefill-engine-error', await outcome(f.router.route(prepare(randomTokens(rng, 80)))));
      await poolsAtZero(f);
    });

    it('prefill-killed: the prefill engine dies with the request on it (four times: no race picks another code)', async () => {
      const f = await fleet({ engine });
      const p = f.prefill[0]!;
      for (let i = 0; i < 4; i++) {
        p.setFaults({ hang: true });
        const id = `killed-${engine}-${i}`;
        const routed = outcome(f.router.route(prepare(randomTokens(rng, 80), { requestId: id })));
        // SGLang: both halves at the rendezvous; vLLM: the prefill on its engine.
        const role = engine === 'sglang' ? 'decode' : 'prefill';
        await until(() => legsOf(f.rec, id)[role][0]?.acceptedAt !== undefined, 'the legs on their engines');
        await p.crash();
        expectDocumented('prefill-killed', await routed);
        await p.restart();
        await poolsAtZero(f);
      }
    });

    it("decode-broke: the decode engine dies after its first output: the stream ends with the decode's transport code", async () => {
      const f = await fleet({ engine });
      const res = await f.router.route(prepare(randomTokens(rng, 80), { maxTokens: 2000 }));
      expect(res.body.kind).toBe('sse');
      const it = (res.body as { events: AsyncIterable<unknown> }).events[Symbol.asyncIterator]();
      await it.next();
      await f.decode[0]!.crash();
      let got: { status: number; code: string | undefined } | undefined;
      try {
        while (!(await it.next()).done);
      } catch (err) {
        if (isKvgateError(err)) got = { status: err.statusCode, code: err.code };
      }
      expectDocumented('decode-broke', got!);
      await poolsAtZero(f);
    });
  });
}

describe('sglang: rendezvous-failed, whichever side notices', () => {
  for (const hung of ['decode', 'prefill'] as const) {
    it(`the ${hung} engine never reaches the rendezvous (the other side times out)`, async () => {
      const f = await fleet({ engine: 'sglang', prefillMocker: { bootstrapTimeoutMs: 300 } });
      f[hung][0]!.setFaults({ hang: true });
      expectDocumented('rendezvous-failed', await outcome(f.router.route(prepare(randomTokens(rng, 80)))));
      await poolsAtZero(f);
    });
  }

  it("the decode engine cannot reach the prefill's bootstrap server (it reports first; the waiting prefill is cancelled)", async () => {
    const closed = await closedPort();
    const f = await fleet({ engine: 'sglang', prefillWorker: { bootstrap: { host: '127.0.0.1', port: closed } } });
    const t0 = performance.now();
    expectDocumented(
      'rendezvous-failed',
      await outcome(f.router.route(prepare(randomTokens(rng, 80), { requestId: 'no-bootstrap' }))),
    );
    // The prefill half was cancelled, well before its own 30 s rendezvous timeout.
    const p = legsOf(f.rec, 'no-bootstrap').prefill[0]!;
    await until(() => p.answeredAt !== undefined, 'the prefill leg to end');
    expect(isKvgateError(p.error, 'KVG_ERR_CLIENT_ABORTED')).toBe(true);
    expect(performance.now() - t0).toBeLessThan(10_000);
    await poolsAtZero(f);
  });
});

/** A loopback port nothing listens on. */
async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

describe('vllm: prefill-no-ticket', () => {
  it('a prefill answer without kv_transfer_params', async () => {
    const f = await fleet({ engine: 'vllm', prefillMocker: { engine: 'sglang', mode: 'aggregated' } });
    expectDocumented('prefill-no-ticket', await outcome(f.router.route(prepare(randomTokens(rng, 80)))));
    await poolsAtZero(f);
  });
});
