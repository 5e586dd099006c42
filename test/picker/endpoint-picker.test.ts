/**
 * `EndpointPicker` over an injected clock and fake timers: the router's recorded choices (approximate mode) are
 * followed within `router_ttl_secs` and forgotten after; the picker ticks its router every second, as the
 * gateway's model router does, and gauges its prefix index's memory (`kvgate_index_memory_bytes`) each tick.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { ManualClock } from '../../src/common/index.js';
import { KvgateMetrics } from '../../src/metrics/index.js';
import { pickerOf } from '../helpers/endpoint-picker.js';
import { sampleSum } from '../helpers/metric-sum.js';
import { EndpointPicker, type PickInput } from '../../src/picker/endpoint-picker.js';
import { promptHashes } from '../../src/wasm/index.js';
import { TestKvPublisher } from '../helpers/zmq-publisher.js';

const A = '10.0.0.1:8000';
const B = '10.0.0.2:8000';
let n = 0;

function input(tokens: number, subset?: string[], base = 1000): PickInput {
  const ids = Uint32Array.from({ length: tokens }, (_, i) => base + i);
  return { requestId: `r${++n}`, tokenIds: ids, hashes: promptHashes(ids, 16), hints: { annotations: [] }, subset };
}

/**
 * Picks `doc()` onto A (a subset of A alone), keeps A the busier pod with a short request, and expects the same
 * prompt to follow A again: the picker's recorded choice outweighs A's load.
 */
function expectFollowed(picker: EndpointPicker, doc: () => PickInput): void {
  const first = doc();
  expect(picker.pick({ ...first, subset: [A] })).toEqual([A]);
  picker.end(first.requestId);
  const busy = input(16, [A], 90_000);
  picker.pick(busy);
  const again = doc();
  expect(picker.pick(again)).toEqual([A]);
  picker.end(again.requestId);
  picker.end(busy.requestId);
}

describe('EndpointPicker: approximate entries expire', () => {
  let picker: EndpointPicker;
  let metrics: KvgateMetrics;
  const clock = new ManualClock(0);
  const indexBytes = async (): Promise<number> =>
    sampleSum(await metrics.registry.metrics(), 'kvgate_index_memory_bytes', { worker_type: 'aggregated' });

  beforeEach(() => {
    vi.useFakeTimers();
    metrics = new KvgateMetrics();
    ({ picker } = pickerOf({ router: { use_kv_events: false, router_ttl_secs: 10 }, level: 'silent', metrics, clock }));
    picker.setEndpoints([
      { name: 'a', endpoint: A },
      { name: 'b', endpoint: B },
    ]);
  });
  afterEach(async () => {
    await picker.close();
    vi.useRealTimers();
  });

  it("follows a prompt's recorded choice within the TTL, and forgets it after", async () => {
    const doc = (): PickInput => input(4096);
    // A short request keeps A busy: within the TTL the recorded 256 blocks still outweigh it.
    expectFollowed(picker, doc);

    expect(await indexBytes()).toBe(0);
    await vi.advanceTimersByTimeAsync(1_000);
    expect(await indexBytes()).toBeGreaterThan(0);
    clock.advance(11_000);
    await vi.advanceTimersByTimeAsync(1_000);
    // The entry is gone: nothing holds the prompt any more, and A is the busier pod.
    const busyLater = input(16, [A], 95_000);
    picker.pick(busyLater);
    const later = doc();
    expect(picker.pick(later)).toEqual([B]);
    picker.end(later.requestId);
    picker.end(busyLater.requestId);
  });
});

describe('EndpointPicker: a pod whose KV events cannot be subscribed', () => {
  it('is an error line naming the pod and a count of refused subscriptions; the pod is picked all the same', async () => {
    const metrics = new KvgateMetrics({ processMetrics: false });
    const { picker, lines } = pickerOf({ metrics });
    try {
      picker.setEndpoints([{ name: 'a', endpoint: A, kvEvents: 'not-an-endpoint' }]);
      await vi.waitFor(() => expect(lines.some((l) => /cannot be subscribed/.test(String(l['msg'])))).toBe(true));
      expect(lines.find((l) => /cannot be subscribed/.test(String(l['msg'])))).toMatchObject({
        level: 50,
        endpoint: A,
        kvEvents: 'not-an-endpoint',
      });
      expect(sampleSum(await metrics.text(), 'kvgate_kv_event_subscriptions_refused_total', { dp_rank: '0' })).toBe(1);
      expect(picker.pick(input(16))).toEqual([A]);
    } finally {
      await picker.close();
    }
  });
});

describe('EndpointPicker: the pool left without a ready endpoint', () => {
  it('is a warn line (a change that leaves endpoints is an info line)', () => {
    const { picker, lines } = pickerOf({ router: { use_kv_events: false } });
    const changes = () => lines.filter((l) => /^picker endpoints changed/.test(String(l['msg'])));
    picker.setEndpoints([
      { name: 'a', endpoint: A },
      { name: 'b', endpoint: B },
    ]);
    picker.setEndpoints([{ name: 'b', endpoint: B }]);
    picker.setEndpoints([]);
    expect(changes().map((l) => [l['level'], l['endpoints']])).toEqual([
      [30, 2],
      [30, 1],
      [40, 0],
    ]);
    expect(changes()[2]).toMatchObject({ left: [B], msg: /no endpoint of the pool is ready/ });
    expect(() => picker.pick(input(16))).toThrow(/no endpoint of the pool is ready/);
    void picker.close();
  });
});

// Series cardinality: each pod that joins gets a new worker id; a pod that left takes its series along, so pod
// churn does not pile up a series set per pod that ever served.
describe('EndpointPicker: pods that come and go', () => {
  it("leave no series labelled with a gone pod's worker id", async () => {
    const metrics = new KvgateMetrics({ processMetrics: false });
    const { picker, lines } = pickerOf({ metrics, level: 'error' });
    const workerIds = async (): Promise<Set<string>> =>
      new Set([...(await metrics.text()).matchAll(/worker_id="(\d+)"/g)].map((m) => m[1]!));
    try {
      for (let i = 0; i < 20; i++) {
        picker.setEndpoints([{ name: `pod-${i}`, endpoint: `10.0.1.${i}:8000`, kvEvents: 'not-an-endpoint' }]);
        await vi.waitFor(() =>
          expect(lines.filter((l) => /cannot be subscribed/.test(String(l['msg'])))).toHaveLength(i + 1),
        );
      }
      // Only the pod there now (id 20) has series.
      await vi.waitFor(async () => expect([...(await workerIds())]).toEqual(['20']));
    } finally {
      await picker.close();
    }
  });
});

// A request booked again (its pod rejoined, or a fallback endpoint served it) keeps its first start: the router's
// expiry of a booking whose end was lost (active_request_expiry_secs) counts from its pick, not from each rebooking.
describe('EndpointPicker: a request booked again keeps its start', () => {
  let picker: EndpointPicker;
  const clock = new ManualClock(0);
  const inFlight = (endpoint: string): number => picker.loads()[endpoint]?.activeRequests ?? 0;
  /** The request whose end never comes, picked onto A. */
  const lost = input(64, [A], 70_000);

  beforeEach(() => {
    vi.useFakeTimers();
    ({ picker } = pickerOf({
      router: { use_kv_events: false, active_request_expiry_secs: 60 },
      level: 'silent',
      clock,
    }));
    picker.setEndpoints([
      { name: 'a', endpoint: A },
      { name: 'b', endpoint: B },
    ]);
  });
  afterEach(async () => {
    await picker.close();
    vi.useRealTimers();
  });

  it.each([
    {
      how: 'on its pod back from NotReady',
      again: (): string => {
        picker.setEndpoints([{ name: 'b', endpoint: B }]);
        picker.setEndpoints([
          { name: 'a', endpoint: A },
          { name: 'b', endpoint: B },
        ]);
        return A;
      },
    },
    {
      how: 'on the fallback endpoint that served it',
      again: (): string => {
        picker.served(lost.requestId, B);
        return B;
      },
    },
  ])('expires $how from its first start', async ({ again }) => {
    expect(picker.pick(lost)).toEqual([A]);
    clock.advance(40_000);
    const on = again();
    expect(inFlight(on)).toBe(1);
    // 50 s after its rebooking, 90 s after its pick: its end never came, so it is freed.
    clock.advance(50_000);
    await vi.advanceTimersByTimeAsync(1_000);
    expect(inFlight(on)).toBe(0);
    picker.end(lost.requestId);
  });
});

// A pod whose KV events stopped while it serves is scored as the gateway scores such a worker: approximate mode, its
// index entries still counted and the picker's own choices for it remembered (router_ttl_secs), since its events no
// longer tell what it holds. Pods A and B name one test ZMQ publisher; the picker's clock is a manual one.
describe('EndpointPicker: a pod whose KV events stop while it serves', () => {
  it("goes stale and is scored on the picker's own choices: a prompt it was given follows it", async () => {
    const clock = new ManualClock(0);
    const { picker, lines } = pickerOf({ clock, metrics: new KvgateMetrics({ processMetrics: false }) });
    const publisher = await TestKvPublisher.start({ replay: false });
    try {
      picker.setEndpoints([
        { name: 'a', endpoint: A, kvEvents: publisher.endpoint },
        { name: 'b', endpoint: B, kvEvents: publisher.endpoint },
      ]);
      await publisher.waitForSubscribers(2);
      await publisher.publish([]); // a heartbeat: both pods' events are live
      const live = (endpoint: string): boolean =>
        lines.some((l) => l['endpoint'] === endpoint && /KV events live/.test(String(l['msg'])));
      await vi.waitFor(() => expect(live(A) && live(B)).toBe(true), { timeout: 5000 });

      // A is picked, then no event comes for the stale bound (kv_events.stale_after_ms: 30 s by default).
      const first = input(16, [A], 50_000);
      picker.pick(first);
      picker.end(first.requestId);
      clock.advance(30_000);
      await vi.waitFor(
        () => expect(lines.some((l) => l['endpoint'] === A && /KV events stale/.test(String(l['msg'])))).toBe(true),
        { timeout: 5000 },
      );

      // A long prompt is picked onto A; its events never tell of it. A short request keeps A the busier pod.
      // Remembered: the prompt's blocks are credited to A (the picker's own choice), which outweighs its load.
      expectFollowed(picker, () => input(4096));
    } finally {
      await picker.close();
      await publisher.close();
    }
  });
});
