/**
 * The noisy-tenant bound, in replay form: the real scheduler (its router queue with tenant classes, DRR and
 * shedding) and the real edge (TenantDirectory: tenants by header, per-tenant rate limits) on a virtual clock,
 * in front of a simulated fleet whose prefill takes a fixed time. Deterministic: a ManualClock, seeded arrivals;
 * nothing depends on the machine's load, which a p99 bound over real processes on a shared 2-core host would.
 *
 * The fleet: 4 workers, each prefill-busy while one prompt is prefilling (`router_queue_threshold` 1.0 over a
 * 100-token batch budget, 128-token prompts), 20 ms a prefill: 200 prefills a second, and the router queue holds
 * everything else, so TTFT is queueing plus one prefill.
 *
 * The quiet tenant (class `team`, weight 50) sends bursts of 200 requests (an agent's fan-out), one every 5 s:
 * its own burst queues, and its p99 TTFT is about the burst's drain time (1 s). The noisy tenant (class `free`,
 * weight 1, a share of 20 requests a second: a tenth of the fleet) sends 200 a second, 10x its share, the whole
 * time. Its excess is refused at the edge (429); what is let in waits its class's DRR turn (1 admission per 50 of
 * the quiet class's while both wait), and a full queue (52 per worker) sheds the noisy class, the one over its
 * share (529). So the quiet tenant's burst loses at most one prefill per 50 of its own plus the prefills in flight
 * when it arrives: about 4 % here, well inside the 10 % bound. The same run with one shared class and no limits
 * (kvgate without tenants) shows what the bound protects: the noise alone fills the fleet.
 */
import { describe, expect, it } from 'vitest';
import { ManualClock, seededRng } from '../../../src/common/index.js';
import { loadGatewayConfig } from '../../../src/config/index.js';
import { KvScheduler, type AdmissionResult, type RoutingDecision } from '../../../src/core/index.js';
import { TenantDirectory, type Tenant } from '../../../src/frontend/tenants.js';
import { isKvgateError } from '../../../src/errors/index.js';
import { promptHashes } from '../../../src/wasm/index.js';

const BS = 16;
const ISL = 128;
const PREFILL_MS = 20;
const DECODE_MS = 200;
const WORKERS = 4;
const BURST = 200;
const BURST_EVERY_MS = 5000;
const BURSTS = 6;
const NOISY_PER_SEC = 200;

const TENANTS = {
  header: 'x-tenant',
  queue_limit_per_worker: 52,
  classes: [
    { name: 'team', weight: 50 },
    { name: 'free', weight: 1, request_rate: 20, request_burst: 5 },
  ],
  members: [
    { name: 'quiet', class: 'team' },
    { name: 'noisy', class: 'free' },
  ],
};

interface Outcome {
  /** Quiet's TTFTs, ms. */
  quietTtft: number[];
  noisy: { sent: number; served: number; rateLimited: number; shed: number };
}

type Ev = { at: number; seq: number; run: () => void };

/** A min-heap of events by time, then order of scheduling. */
class Events {
  readonly #h: Ev[] = [];
  #seq = 0;
  add(at: number, run: () => void): void {
    const h = this.#h;
    h.push({ at, seq: this.#seq++, run });
    for (let i = h.length - 1; i > 0;) {
      const p = (i - 1) >> 1;
      if (!less(h[i]!, h[p]!)) break;
      [h[i], h[p]] = [h[p]!, h[i]!];
      i = p;
    }
  }
  pop(): Ev | undefined {
    const h = this.#h;
    const top = h[0];
    const last = h.pop();
    if (h.length > 0 && last !== undefined) {
      h[0] = last;
      for (let i = 0; ;) {
        const l = 2 * i + 1;
        const r = l + 1;
        let m = i;
        if (l < h.length && less(h[l]!, h[m]!)) m = l;
        if (r < h.length && less(h[r]!, h[m]!)) m = r;
        if (m === i) break;
        [h[i], h[m]] = [h[m]!, h[i]!];
        i = m;
      }
    }
    return top;
  }
}
const less = (a: Ev, b: Ev): boolean => a.at < b.at || (a.at === b.at && a.seq < b.seq);

const flush = (): Promise<void> => new Promise((r) => setImmediate(r));

async function run(opts: { noisy: boolean; tenants: boolean }): Promise<Outcome> {
  const clock = new ManualClock();
  const s = new KvScheduler({ blockSize: BS, config: { routerQueueThreshold: 1.0 }, clock, rng: seededRng(7) });
  for (let w = 1; w <= WORKERS; w++) s.addWorker(w, { maxNumBatchedTokens: 100 });
  const model = { name: 'm', router_mode: 'round-robin', workers: [{ id: 1, url: 'http://10.0.0.1:8000' }] };
  const section = opts.tenants ? TENANTS : undefined;
  const config = loadGatewayConfig({ base: { models: [model], tenants: section }, env: {} });
  const dir = new TenantDirectory(config.tenants, undefined, () => clock.now());
  const events = new Events();
  const out: Outcome = { quietTtft: [], noisy: { sent: 0, served: 0, rateLimited: 0, shed: 0 } };
  let n = 0;

  const started = (id: string, arrivedAt: number, quiet: boolean): void => {
    events.add(clock.now() + PREFILL_MS, () => {
      s.markPrefillCompleted(id);
      if (quiet) out.quietTtft.push(clock.now() - arrivedAt);
      else out.noisy.served++;
      events.add(clock.now() + DECODE_MS, () => void s.free(id));
    });
  };
  const arrive = (tenant: Tenant, quiet: boolean): void => {
    const id = `r${n++}`;
    const at = clock.now();
    if (!quiet) out.noisy.sent++;
    try {
      dir.arrive(tenant);
      dir.admit(tenant, ISL);
    } catch (err) {
      if (!isKvgateError(err, 'KVG_ERR_RATE_LIMITED')) throw err;
      out.noisy.rateLimited++;
      return;
    }
    const tokens = Array.from({ length: ISL }, (_, i) => n * 1000 + i);
    const o = s.schedule({ requestId: id, isl: ISL, hashes: promptHashes(tokens, BS), tenant: tenant.hint });
    if (o.status === 'routed') started(id, at, quiet);
    else if (o.status === 'rejected') out.noisy.shed++;
    else
      void o.ticket.admitted.then((r: AdmissionResult) => {
        if (r.status === 'routed') started(id, at, quiet);
        else if (r.status === 'failed' && !quiet) out.noisy.shed++;
        else throw new Error(`quiet request ${id} ended ${r.status}`);
        return r.status === 'routed' ? (r.decision as RoutingDecision) : undefined;
      });
  };

  const quiet = dir.of(undefined, { 'x-tenant': 'quiet' });
  const noisy = dir.of(undefined, { 'x-tenant': 'noisy' });
  for (let b = 0; b < BURSTS; b++)
    events.add(1000 + b * BURST_EVERY_MS, () => {
      for (let i = 0; i < BURST; i++) arrive(quiet, true);
    });
  if (opts.noisy) {
    const rng = seededRng(11);
    for (let t = -Math.log(1 - rng()) * (1000 / NOISY_PER_SEC); t < BURSTS * BURST_EVERY_MS;) {
      events.add(t, () => arrive(noisy, false));
      t += -Math.log(1 - rng()) * (1000 / NOISY_PER_SEC);
    }
  }
  for (let e = events.pop(); e !== undefined; e = events.pop()) {
    if (e.at > clock.now()) clock.set(e.at);
    e.run();
    // Admissions from the queue resolve their tickets in microtasks: let them start before time moves on.
    await flush();
  }
  return out;
}

function p99(xs: number[]): number {
  const sorted = [...xs].sort((a, b) => a - b);
  return sorted[Math.ceil(0.99 * sorted.length) - 1]!;
}

describe('tenant classes: a noisy tenant at 10x its share', () => {
  it("raises the quiet tenant's p99 TTFT by less than 10 %", async () => {
    const alone = await run({ noisy: false, tenants: true });
    const noisy = await run({ noisy: true, tenants: true });
    const shared = await run({ noisy: true, tenants: false });
    expect(alone.quietTtft).toHaveLength(BURST * BURSTS);
    expect(noisy.quietTtft).toHaveLength(BURST * BURSTS);
    const a = p99(alone.quietTtft);
    const b = p99(noisy.quietTtft);
    const c = p99(shared.quietTtft);
    const n = noisy.noisy;
    console.log(
      `noisy tenant: quiet p99 TTFT alone ${a.toFixed(1)} ms, with the noisy tenant ${b.toFixed(1)} ms ` +
        `(+${(((b - a) / a) * 100).toFixed(1)} %); noisy sent ${n.sent}, served ${n.served}, ` +
        `rate-limited ${n.rateLimited}, shed ${n.shed}; without tenant classes the quiet p99 is ${c.toFixed(1)} ms`,
    );
    expect(b).toBeLessThanOrEqual(a * 1.1);
    // The noisy tenant sent 10x its share: most of it refused, about its share served.
    expect(n.rateLimited).toBeGreaterThan(n.sent * 0.8);
    expect(n.served).toBeGreaterThan(0);
    // Without the classes, the same noise costs the quiet tenant far more than the bound.
    expect(c).toBeGreaterThan(a * 1.1);
  }, 120_000);
});
