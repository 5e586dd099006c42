/**
 * Issue 5, point 1: disaggregated serving end to end against mocker engines
 * in prefill and decode roles, for both handoff protocols, through the real
 * HTTP frontend (completions and chat, streaming and not), plus KV-aware
 * prefill selection and sticky prefill sessions at the router.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { seededRng } from '../../../src/common/index.js';
import {
  BLOCK,
  PREFILL_ID,
  booked,
  drain,
  legsOf,
  prepare,
  randomTokens,
  startDisaggFleet,
  until,
  type DisaggFleet,
} from './fleet.js';
import { startGateway, type TestGateway } from './gateway.js';

interface Answer {
  status: number;
  headers: Headers;
  /** Generated pieces (one per streamed chunk with content, or the whole text). */
  pieces: string[];
  usage:
    | { prompt_tokens: number; completion_tokens: number; prompt_tokens_details?: { cached_tokens?: number } }
    | undefined;
  done: boolean;
}

async function ask(
  url: string,
  endpoint: 'chat' | 'completion',
  stream: boolean,
  requestId: string,
  maxTokens: number,
): Promise<Answer> {
  const body =
    endpoint === 'chat'
      ? {
          model: 'mock-model',
          messages: [{ role: 'user', content: `Explain prefill and decode, request ${requestId}.` }],
          max_tokens: maxTokens,
        }
      : {
          model: 'mock-model',
          prompt: `Once upon a time there was a router named ${requestId} that`,
          max_tokens: maxTokens,
        };
  const res = await fetch(`${url}/v1/${endpoint === 'chat' ? 'chat/completions' : 'completions'}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-request-id': requestId },
    body: JSON.stringify({ ...body, stream, ...(stream ? { stream_options: { include_usage: true } } : {}) }),
  });
  const text = await res.text();
  if (!stream) {
    const json = JSON.parse(text);
    const piece = endpoint === 'chat' ? json.choices?.[0]?.message?.content : json.choices?.[0]?.text;
    return {
      status: res.status,
      headers: res.headers,
      pieces: piece === undefined ? [] : [piece],
      usage: json.usage,
      done: true,
    };
  }
  const pieces: string[] = [];
  let usage;
  let done = false;
  for (const block of text.split('\n\n')) {
    const data = block.startsWith('data: ') ? block.slice(6) : undefined;
    if (data === undefined) continue;
    if (data === '[DONE]') {
      done = true;
      continue;
    }
    const j = JSON.parse(data);
    if (j.usage) usage = j.usage;
    const c = j.choices?.[0];
    const piece = endpoint === 'chat' ? c?.delta?.content : c?.text;
    if (typeof piece === 'string' && piece.length > 0) pieces.push(piece);
  }
  return { status: res.status, headers: res.headers, pieces, usage, done };
}

for (const engine of ['vllm', 'sglang'] as const) {
  describe(`${engine}: through the HTTP frontend`, () => {
    let f: DisaggFleet;
    let gw: TestGateway;

    beforeAll(async () => {
      // SGLang: the second prefill engine has two data-parallel ranks (rank 1 must come back from the room).
      f = await startDisaggFleet({
        engine,
        prefillMocker: (i) => (i === 1 && engine === 'sglang' ? { dpSize: 2, kvEvents: false } : {}),
      });
      gw = await startGateway(f.router, [...f.prefillWorkers, ...f.decodeWorkers], f.metrics);
    });
    afterAll(async () => {
      await gw?.close();
      await f?.close();
    });

    let n = 0;
    for (const endpoint of ['completion', 'chat'] as const) {
      for (const stream of [false, true]) {
        it(`${endpoint}, ${stream ? 'streaming' : 'not streaming'}: the decode engine answers, prefill ran one token with the right handoff`, async () => {
          const id = `${engine}-${endpoint}-${stream}-${++n}`;
          const gen = (): Map<number, number> =>
            new Map(
              [...f.prefillWorkers, ...f.decodeWorkers].map((w) => [
                w.id,
                f
                  .mockerOf(w.id)
                  .stats()
                  .ranks.reduce((a, r) => a + r.generationTokens, 0),
              ]),
            );
          const before = gen();
          const a = await ask(gw.url, endpoint, stream, id, 6);
          expect(a.status).toBe(200);
          const decodeId = Number(a.headers.get('x-kvgate-worker'));
          const prefillId = Number(a.headers.get('x-kvgate-prefill-worker'));
          const prefillRank = Number(a.headers.get('x-kvgate-prefill-worker-dp-rank'));
          expect(f.decodeWorkers.map((w) => w.id)).toContain(decodeId);
          expect(f.prefillWorkers.map((w) => w.id)).toContain(prefillId);

          // The client got the decode engine's six tokens; the prefill engine generated exactly one.
          const after = gen();
          expect(after.get(decodeId)! - before.get(decodeId)!).toBe(6);
          expect(after.get(prefillId)! - before.get(prefillId)!).toBe(1);
          expect(a.usage?.completion_tokens).toBe(6);
          if (stream) {
            expect(a.done).toBe(true);
            expect(a.pieces).toHaveLength(6);
          } else {
            expect(a.pieces[0]!.length).toBeGreaterThan(0);
          }

          const legs = legsOf(f.rec, id);
          expect(legs.prefill).toHaveLength(1);
          expect(legs.decode).toHaveLength(1);
          const p = legs.prefill[0]!;
          const d = legs.decode[0]!;
          expect(p.workerId).toBe(prefillId);
          expect(d.workerId).toBe(decodeId);
          expect(p.body).toMatchObject({ max_tokens: 1, stream: false });
          expect(p.body).not.toHaveProperty('stream_options');
          // The decode leg streams with usage whatever the client asked (a non-streaming answer is assembled from it).
          expect(d.body).toMatchObject({ max_tokens: 6, stream: true, stream_options: { include_usage: true } });
          if (engine === 'vllm') {
            expect(p.body['kv_transfer_params']).toMatchObject({ do_remote_decode: true, do_remote_prefill: false });
            // The decode engine got the prefill's ticket verbatim.
            const ticket = (p.json as Record<string, unknown>)['kv_transfer_params'];
            expect(ticket).toMatchObject({ do_remote_prefill: true });
            expect(d.body['kv_transfer_params']).toEqual(ticket);
          } else {
            const w = f.prefillWorkers.find((x) => x.id === prefillId)!;
            const triple = {
              bootstrap_host: w.bootstrap!.host,
              bootstrap_port: w.bootstrap!.port,
              bootstrap_room: p.body['bootstrap_room'],
            };
            expect(p.body).toMatchObject(triple);
            expect(d.body).toMatchObject(triple);
            const room = p.body['bootstrap_room'] as bigint;
            expect(typeof room).toBe('bigint');
            expect(room % BigInt(w.dpSize)).toBe(BigInt(prefillRank - w.dpStart));
            expect(room <= (1n << 63n) - 1n).toBe(true);
          }
          expect(booked(f.pool())).toMatchObject({ requests: 0, inflight: 0, tracked: 0 });
          expect(booked(f.router.decode)).toMatchObject({ requests: 0, inflight: 0, tracked: 0 });
        });
      }
    }

    if (engine === 'sglang') {
      it('rooms carry the prefill rank on a data-parallel prefill worker (both ranks served)', async () => {
        const dpWorker = f.prefillWorkers[1]!;
        const ranks = new Set<number>();
        for (let i = 0; i < 6; i++) {
          const id = `dp-${i}`;
          const res = await f.router.route(
            prepare(randomTokens(seededRng(i), 40), {
              requestId: id,
              hints: { annotations: [], prefillWorkerId: dpWorker.id, prefillDpRank: i % 2 },
            }),
          );
          await drain(res);
          expect(res.prefillWorker).toEqual({ workerId: dpWorker.id, dpRank: i % 2 });
          const decodeBody = legsOf(f.rec, id).decode[0]!.body;
          const room = decodeBody['bootstrap_room'] as bigint;
          expect(Number(room % 2n)).toBe(i % 2);
          // The prefill rank is also carried to decode explicitly.
          expect(decodeBody['disagg_prefill_dp_rank']).toBe(i % 2);
          ranks.add(i % 2);
        }
        expect(ranks.size).toBe(2);
        // The engine ran each prefill on the rank the room names.
        const st = f.mockerOf(dpWorker.id).stats().ranks;
        expect(st[0]!.promptTokens).toBeGreaterThan(0);
        expect(st[1]!.promptTokens).toBeGreaterThan(0);
      });
    }

    it('the prefill worker is exported in metrics', async () => {
      const text = await f.metrics.text();
      expect(text).toMatch(
        new RegExp(
          `kvgate_router_disagg_requests_total\\{model="mock-model",prefill_worker_id="(${PREFILL_ID}|${PREFILL_ID + 1})",handoff="${engine === 'vllm' ? 'sync' : 'bootstrap'}",outcome="decoded"\\} [1-9]`,
        ),
      );
      const transfers = /kvgate_router_kv_transfer_estimated_latency_seconds_count\{model="mock-model"\} (\d+)/.exec(
        text,
      );
      if (engine === 'vllm') expect(Number(transfers?.[1])).toBeGreaterThanOrEqual(4);
      // The series exists at zero from the start; the bootstrap pair never observes it.
      else expect(Number(transfers?.[1])).toBe(0);
    });
  });
}

const PREFILL_CASES = [
  ['vllm', 'pin'],
  ['sglang', 'pin'],
  ['vllm', 'cost'], // KV mode's default: no session reaches the prefill pool
] as const;
for (const [engine, affinity] of PREFILL_CASES) {
  describe(`${engine}: KV-aware prefill selection and sessions (session_affinity: ${affinity})`, () => {
    let f: DisaggFleet;
    const rng = seededRng(engine === 'vllm' ? 5 : 6);

    /** Blocks of `doc` the prefill index holds for a worker. */
    const depthOn = (doc: number[], workerId: number): number => {
      const index = f.pool().kvRouter!.index;
      const m = index.findMatches(prepare(doc).hashes.local);
      for (let i = 0; i < m.count; i++) if (index.slotWorker(m.slots[i]!)!.workerId === workerId) return m.depths[i]!;
      return 0;
    };

    beforeAll(async () => {
      f = await startDisaggFleet({ engine, prefill: 2, decode: 1, router: { sessionAffinity: affinity } });
      // A ZMQ subscription misses what is published before it has joined (these engines keep no replay
      // buffer), so each prefill worker's events are seen to arrive before a test relies on them: a
      // throwaway prompt, sent again until its blocks reach the index.
      const warmRng = seededRng(99); // the tests' own draws stay as they were
      for (const w of f.prefillWorkers) {
        await until(
          async () => {
            const doc = randomTokens(warmRng, 2 * BLOCK);
            await drain(
              await f.router.route(prepare([...doc, 1], { hints: { annotations: [], prefillWorkerId: w.id } })),
            );
            return until(() => depthOn(doc, w.id) === 2, 'one prompt indexed', 1000).then(
              () => true,
              () => false,
            );
          },
          `KV events from prefill worker ${w.id}`,
          20_000,
        );
      }
    }, 30_000);
    afterAll(async () => {
      await f?.close();
    });

    it('a request goes to the prefill worker that caches its prefix', async () => {
      const [a, b] = [f.prefillWorkers[0]!.id, f.prefillWorkers[1]!.id];
      const docA = randomTokens(rng, 24 * BLOCK);
      const docB = randomTokens(rng, 24 * BLOCK);
      // Prime: each document prefilled once on a chosen worker; its KV events feed the prefill index.
      for (const [doc, w] of [
        [docA, a],
        [docB, b],
      ] as const) {
        await drain(
          await f.router.route(prepare([...doc, 1, 2, 3], { hints: { annotations: [], prefillWorkerId: w } })),
        );
        await until(() => depthOn(doc, w) === 24, `the prefix on prefill worker ${w}`);
      }
      for (let i = 0; i < 4; i++) {
        for (const [doc, w] of [
          [docA, a],
          [docB, b],
        ] as const) {
          const res = await f.router.route(prepare([...doc, ...randomTokens(rng, 9)], { maxTokens: 3 }));
          expect(res.prefillWorker?.workerId).toBe(w);
          const { usage } = await drain(res);
          // vLLM: the client's usage reports the prefill engine's cache hits (harvested from its answer).
          if (engine === 'vllm') expect(usage?.prompt_tokens_details?.cached_tokens).toBe(24 * BLOCK);
        }
      }
      // The prefill engines served the shared prefix from their caches.
      const hits = f.prefill.map((m) => m.stats().ranks[0]!.prefixHitTokens);
      expect(hits[0]).toBeGreaterThanOrEqual(4 * 24 * BLOCK);
      expect(hits[1]).toBeGreaterThanOrEqual(4 * 24 * BLOCK);
      const q = await f.router.query(prepare([...docA, 5]));
      expect(q.prefillWorker?.workerId).toBe(a);
      expect(q.prefillOverlapBlocks).toBe(24);
      expect(q.worker.workerId).toBe(f.decodeWorkers[0]!.id);
    });

    it('a pinned session sticks to its prefill worker, even against the prefix index, until served elsewhere while it is down', async () => {
      const [a, b] = [f.prefillWorkers[0]!.id, f.prefillWorkers[1]!.id];
      const doc = randomTokens(rng, 16 * BLOCK);
      await drain(await f.router.route(prepare([...doc, 7], { hints: { annotations: [], prefillWorkerId: b } })));
      await until(() => depthOn(doc, b) === 16, 'the prefix on b');
      const session = { id: `s-${engine}` };
      // First turn pinned to a binds the session to a.
      const first = await f.router.route(
        prepare(randomTokens(rng, 40), { hints: { annotations: [], prefillWorkerId: a, session } }),
      );
      await drain(first);
      expect(f.router.prefill.sessions.lookup(session.id)?.workerId).toBe(affinity === 'pin' ? a : undefined);
      // Without the session the index wins (asked before the session's turns cache the prefix on a too).
      const free = await f.router.route(prepare([...doc, 99]));
      expect(free.prefillWorker?.workerId).toBe(b);
      await drain(free);
      // Next turns carry b's cached prefix but stay on a.
      for (let i = 0; i < 2; i++) {
        const res = await f.router.route(
          prepare([...doc, ...randomTokens(rng, 5)], { hints: { annotations: [], session } }),
        );
        expect(res.prefillWorker?.workerId).toBe(affinity === 'pin' ? a : b); // unpinned, the index wins
        await drain(res);
      }
      if (affinity === 'cost') {
        expect(f.router.prefill.sessions.size).toBe(0);
        return;
      }
      // a is marked down: its binding is held (not routed to), the session's turn follows the index to b and
      // binds there (b now holds its whole context), so a's return leaves it on b.
      f.registry.markDown(a);
      expect(f.router.prefill.sessions.lookup(session.id)?.workerId).toBe(a);
      const moved = await f.router.route(prepare([...doc, 100], { hints: { annotations: [], session } }));
      expect(moved.prefillWorker?.workerId).toBe(b);
      await drain(moved);
      expect(f.router.prefill.sessions.lookup(session.id)?.workerId).toBe(b);
      f.registry.markUp(a);
      expect(f.router.prefill.sessions.lookup(session.id)?.workerId).toBe(b);
      // A closing request unbinds.
      await drain(
        await f.router.route(
          prepare([...doc, 101], { hints: { annotations: [], session: { ...session, action: 'close' } } }),
        ),
      );
      expect(f.router.prefill.sessions.lookup(session.id)).toBeUndefined();
      expect(booked(f.pool())).toMatchObject({ requests: 0, inflight: 0, tracked: 0 });
      expect(booked(f.router.decode)).toMatchObject({ requests: 0, inflight: 0, tracked: 0 });
    });
  });
}

describe('non-KV modes', () => {
  let f: DisaggFleet | undefined;
  afterAll(async () => {
    await f?.close();
  });

  it('round-robin: the prefill router is a simple router and its cursor advances with each prefill', async () => {
    f = await startDisaggFleet({ engine: 'vllm', prefill: 2, decode: 2, router: { mode: 'round-robin' } });
    expect(f.pool().kvRouter).toBeUndefined();
    const prefills: number[] = [];
    const decodes: number[] = [];
    for (let i = 0; i < 4; i++) {
      const res = await f.router.route(prepare(randomTokens(seededRng(50 + i), 40)));
      prefills.push(res.prefillWorker!.workerId);
      decodes.push(res.worker.workerId);
      expect((await drain(res)).usage?.completion_tokens).toBe(4);
    }
    expect(prefills).toEqual([101, 102, 101, 102]);
    expect(decodes).toEqual([201, 202, 201, 202]);
    expect(booked(f.pool())).toMatchObject({ requests: 0, inflight: 0 });
    expect(booked(f.router.decode)).toMatchObject({ requests: 0, inflight: 0 });
    await f.close();
    f = undefined;
  });

  it('direct: both workers come from the request', async () => {
    f = await startDisaggFleet({ engine: 'sglang', prefill: 2, decode: 2, router: { mode: 'direct' } });
    const res = await f.router.route(
      prepare(randomTokens(seededRng(60), 40), {
        hints: { annotations: [], prefillWorkerId: 102, decodeWorkerId: 201 },
      }),
    );
    expect(res.prefillWorker).toEqual({ workerId: 102, dpRank: 0 });
    expect(res.worker).toEqual({ workerId: 201, dpRank: 0 });
    expect((await drain(res)).usage?.completion_tokens).toBe(4);
    await expect(
      f.router.route(prepare(randomTokens(seededRng(61), 40), { hints: { annotations: [], decodeWorkerId: 201 } })),
    ).rejects.toThrow(/must name its prefill worker/);
    await expect(
      f.router.route(
        prepare(randomTokens(seededRng(62), 40), {
          requestId: 'direct-no-decode',
          hints: { annotations: [], prefillWorkerId: 102 },
        }),
      ),
    ).rejects.toThrow(/must name its decode worker/);
    expect(legsOf(f.rec, 'direct-no-decode').prefill).toHaveLength(0);
    expect(booked(f.pool())).toMatchObject({ requests: 0, inflight: 0 });
    expect(booked(f.router.decode)).toMatchObject({ requests: 0, inflight: 0 });
  });
});
