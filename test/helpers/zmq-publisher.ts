/**
 * A minimal engine-side KV-event publisher for tests, speaking the wire
 * format of engine-wire-formats.md 1.3-1.4 and 2: a PUB socket sending
 * `[topic, seq u64 BE, msgpack batch]` and a ROUTER replay endpoint answering
 * `[<empty>, start_seq]` with every buffered batch >= start_seq and the
 * 0xFF..FF end marker. Both bind to 127.0.0.1 on OS-chosen ports.
 *
 * It uses an XPUB so tests can await the subscription instead of sleeping
 * (the subscriber only sees PUB semantics). Knobs for failure tests:
 * `publish(..., { drop: true })` buffers a batch for replay without sending
 * it (what a PUB does at its high-water mark), `restart()` starts the
 * sequence over like a restarted engine, `replayMode = 'silent'` makes the
 * replay endpoint swallow requests, `sendFrames` sends arbitrary frames.
 */
import { encode } from '@msgpack/msgpack';
import { Router, XPublisher } from 'zeromq';

export type EventEncoding = 'vllm-array' | 'vllm-map' | 'sglang-array' | 'sglang-map';
export const ENCODINGS: readonly EventEncoding[] = ['vllm-array', 'vllm-map', 'sglang-array', 'sglang-map'];

export type TestEvent =
  | {
      type: 'stored';
      blockHashes: readonly bigint[];
      parent: bigint | null;
      tokens: readonly number[];
      blockSize: number;
      loraName?: string;
      loraId?: number;
      medium?: string;
      cacheSalt?: string;
      /** vLLM's `extra_keys` (one entry a block; a salted request's `cache_salt` in block 0's); vLLM encodings only. */
      extraKeys?: readonly (readonly string[] | null)[];
      groupIdx?: number;
    }
  | { type: 'removed'; blockHashes: readonly bigint[]; medium?: string; groupIdx?: number }
  | { type: 'cleared' };

/** vLLM sends u64 (msgpack writes the smallest int format); SGLang sends the same bits as signed i64. */
function wireHash(h: bigint, encoding: EventEncoding): number | bigint {
  const v = encoding.startsWith('sglang') ? BigInt.asIntN(64, h) : BigInt.asUintN(64, h);
  return v >= BigInt(Number.MIN_SAFE_INTEGER) && v <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(v) : v;
}

function wireEvent(ev: TestEvent, encoding: EventEncoding): unknown {
  const hashes = (hs: readonly bigint[]): (number | bigint)[] => hs.map((h) => wireHash(h, encoding));
  if (ev.type === 'cleared') return encoding.endsWith('map') ? { type: 'AllBlocksCleared' } : ['AllBlocksCleared'];
  const medium = ev.medium ?? 'GPU';
  if (ev.type === 'removed') {
    switch (encoding) {
      case 'vllm-array':
        return ['BlockRemoved', hashes(ev.blockHashes), medium, ev.groupIdx ?? null];
      case 'vllm-map':
        return { type: 'BlockRemoved', block_hashes: hashes(ev.blockHashes), medium, group_idx: ev.groupIdx ?? 0 };
      case 'sglang-array':
        return ['BlockRemoved', hashes(ev.blockHashes), medium];
      case 'sglang-map':
        return { type: 'BlockRemoved', block_hashes: hashes(ev.blockHashes), medium };
    }
  }
  const parent = ev.parent === null ? null : wireHash(ev.parent, encoding);
  switch (encoding) {
    case 'vllm-array':
      // 11 declared fields: ..., lora_id, medium, lora_name, extra_keys, group_idx, kv_cache_spec_kind, sliding_window.
      return [
        'BlockStored',
        hashes(ev.blockHashes),
        parent,
        [...ev.tokens],
        ev.blockSize,
        ev.loraId ?? null,
        medium,
        ev.loraName ?? null,
        ev.extraKeys ?? null,
        ev.groupIdx ?? null,
        null,
        null,
      ];
    case 'vllm-map':
      return {
        type: 'BlockStored',
        block_hashes: hashes(ev.blockHashes),
        parent_block_hash: parent,
        token_ids: [...ev.tokens],
        block_size: ev.blockSize,
        lora_id: ev.loraId ?? null,
        medium,
        lora_name: ev.loraName ?? null,
        ...(ev.extraKeys !== undefined ? { extra_keys: ev.extraKeys } : {}),
        group_idx: ev.groupIdx ?? 0,
        kv_cache_spec_kind: 'full_attention',
      };
    case 'sglang-array': {
      const arr: unknown[] = [
        'BlockStored',
        hashes(ev.blockHashes),
        parent,
        [...ev.tokens],
        ev.blockSize,
        ev.loraId ?? null,
        medium,
      ];
      if (ev.cacheSalt !== undefined) arr.push({ cache_salt: ev.cacheSalt });
      return arr;
    }
    case 'sglang-map': {
      const m: Record<string, unknown> = {
        type: 'BlockStored',
        block_hashes: hashes(ev.blockHashes),
        parent_block_hash: parent,
        token_ids: [...ev.tokens],
        block_size: ev.blockSize,
        lora_id: ev.loraId ?? null,
        medium,
      };
      if (ev.cacheSalt !== undefined) m.cache_salt = ev.cacheSalt;
      if (ev.loraName !== undefined) m.lora_name = ev.loraName;
      return m;
    }
  }
}

/** One msgpack `KVEventBatch`: `[ts, events, dp_rank]`. */
export function encodeBatch(
  events: readonly TestEvent[],
  opts: { encoding?: EventEncoding; dpRank?: number | null; ts?: number } = {},
): Uint8Array {
  const encoding = opts.encoding ?? 'vllm-array';
  const dpRank = opts.dpRank === undefined ? 0 : opts.dpRank;
  return encode([opts.ts ?? 1.5, events.map((e) => wireEvent(e, encoding)), dpRank], { useBigInt64: true });
}

function seqFrame(seq: bigint): Buffer {
  const b = Buffer.alloc(8);
  b.writeBigUInt64BE(BigInt.asUintN(64, seq));
  return b;
}

export interface TestKvPublisherOptions {
  encoding?: EventEncoding;
  topic?: string;
  dpRank?: number;
  /** Bind a replay ROUTER. Default true. */
  replay?: boolean;
  /** Batches kept for replay (vLLM `buffer_steps`). Default 10000. */
  bufferSteps?: number;
  /** First sequence number (vLLM/SGLang: 0; TensorRT-LLM: a timestamp). */
  firstSeq?: bigint;
  sendHighWaterMark?: number;
  /**
   * Loopback addresses the PUB binds, all on one OS-chosen port (pods of different IPs naming the same
   * publisher port); `endpoint` is the first's. Default `['127.0.0.1']`.
   */
  hosts?: readonly string[];
}

const EMPTY = Buffer.alloc(0);
const END = seqFrame((1n << 64n) - 1n);

export class TestKvPublisher {
  readonly encoding: EventEncoding;
  readonly topic: string;
  readonly dpRank: number;
  readonly #pub: XPublisher;
  readonly #router: Router | undefined;
  readonly #bufferSteps: number;
  readonly #firstSeq: bigint;
  readonly #buffer: { seq: bigint; payload: Uint8Array }[] = [];
  #seq: bigint;
  #subscriptions = 0;
  #waiters: { n: number; resolve: () => void }[] = [];
  readonly #loops: Promise<void>[] = [];
  /** 'answer' (default) or 'silent' (swallow requests: the client times out). */
  replayMode: 'answer' | 'silent' = 'answer';
  /** Start sequence numbers of every replay request received. */
  readonly replayRequests: bigint[] = [];
  endpoint = '';
  replayEndpoint: string | undefined;

  private constructor(opts: TestKvPublisherOptions) {
    this.encoding = opts.encoding ?? 'vllm-array';
    this.topic = opts.topic ?? '';
    this.dpRank = opts.dpRank ?? 0;
    this.#bufferSteps = opts.bufferSteps ?? 10_000;
    this.#firstSeq = opts.firstSeq ?? 0n;
    this.#seq = this.#firstSeq;
    this.#pub = new XPublisher({ linger: 0, sendHighWaterMark: opts.sendHighWaterMark ?? 100_000 });
    this.#pub.verbosity = 'allSubs';
    this.#router = opts.replay === false ? undefined : new Router({ linger: 0 });
  }

  static async start(opts: TestKvPublisherOptions = {}): Promise<TestKvPublisher> {
    const p = new TestKvPublisher(opts);
    const [first = '127.0.0.1', ...more] = opts.hosts ?? [];
    await p.#pub.bind(`tcp://${first}:*`);
    p.endpoint = p.#pub.lastEndpoint!;
    const port = p.endpoint.slice(p.endpoint.lastIndexOf(':') + 1);
    for (const host of more) await p.#pub.bind(`tcp://${host}:${port}`);
    p.#loops.push(p.#subscriptionLoop());
    if (p.#router !== undefined) {
      await p.#router.bind('tcp://127.0.0.1:*');
      p.replayEndpoint = p.#router.lastEndpoint!;
      p.#loops.push(p.#replayLoop());
    }
    return p;
  }

  /** Next sequence number to be published. */
  get nextSeq(): bigint {
    return this.#seq;
  }

  /** Resolves once `n` subscriptions have arrived in total. */
  waitForSubscribers(n = 1): Promise<void> {
    if (this.#subscriptions >= n) return Promise.resolve();
    return new Promise((resolve) => this.#waiters.push({ n, resolve }));
  }

  async #subscriptionLoop(): Promise<void> {
    try {
      for await (const [msg] of this.#pub) {
        if (msg !== undefined && msg[0] === 1) {
          this.#subscriptions++;
          this.#waiters = this.#waiters.filter((w) => (w.n <= this.#subscriptions ? (w.resolve(), false) : true));
        }
      }
    } catch {
      // closed
    }
  }

  async #replayLoop(): Promise<void> {
    const router = this.#router!;
    try {
      for await (const frames of router) {
        const [id, , start] = frames;
        if (id === undefined || start === undefined || start.length !== 8) continue;
        const from = start.readBigUInt64BE(0);
        this.replayRequests.push(from);
        if (this.replayMode === 'silent') continue;
        for (const b of this.#buffer) if (b.seq >= from) await router.send([id, EMPTY, seqFrame(b.seq), b.payload]);
        await router.send([id, EMPTY, END, EMPTY]);
      }
    } catch {
      // closed
    }
  }

  /** Publishes one batch of events; returns its seq. `drop` keeps it for replay but never sends it. */
  publish(events: readonly TestEvent[], opts: { drop?: boolean; encoding?: EventEncoding } = {}): Promise<bigint> {
    return this.publishPayload(
      encodeBatch(events, { encoding: opts.encoding ?? this.encoding, dpRank: this.dpRank }),
      opts,
    );
  }

  /** Publishes a raw payload under the next seq (garbled payloads, other ranks). */
  async publishPayload(payload: Uint8Array, opts: { drop?: boolean } = {}): Promise<bigint> {
    const seq = this.#seq++;
    this.#buffer.push({ seq, payload });
    if (this.#buffer.length > this.#bufferSteps) this.#buffer.shift();
    if (opts.drop !== true) await this.#pub.send([this.topic, seqFrame(seq), payload]);
    return seq;
  }

  /** Sends arbitrary frames, outside the sequence. */
  async sendFrames(frames: (string | Uint8Array)[]): Promise<void> {
    await this.#pub.send(frames);
  }

  /** Forgets the replay buffer and starts the sequence over, like a restarted engine. */
  restart(): void {
    this.#seq = this.#firstSeq;
    this.#buffer.length = 0;
  }

  /** Drops the oldest buffered batches so only seq >= `seq` remain (a buffer that wrapped). */
  forgetBefore(seq: bigint): void {
    while (this.#buffer.length > 0 && this.#buffer[0]!.seq < seq) this.#buffer.shift();
  }

  async close(): Promise<void> {
    this.#pub.close();
    this.#router?.close();
    await Promise.all(this.#loops);
  }
}

/**
 * `[1.5, [['BlockRemoved', [hash × n], nil]], 0]` written out byte by byte (encoding millions of hashes with the
 * msgpack encoder takes seconds): n + 7 msgpack elements, n + 27 bytes with a one-byte `hash` (< 128).
 */
export function hugeRemoval(n: number, hash: number): Uint8Array {
  const head = [0x93, 0xcb, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0, 0x91, 0x93, 0xac, ...Buffer.from('BlockRemoved')];
  const out = new Uint8Array(head.length + 5 + n + 2);
  out.set(head, 0);
  let at = head.length;
  out[at++] = 0xdd;
  new DataView(out.buffer).setUint32(at, n);
  at += 4;
  out.fill(hash, at, at + n);
  out[at + n] = 0xc0; // medium: nil
  out[at + n + 1] = 0x00; // dp rank 0
  return out;
}
