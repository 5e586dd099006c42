/** Shared helpers for the mocker's integration tests: HTTP calls, ZMQ subscriber with slow-joiner warm-up, replay client. */
import { decode } from '@msgpack/msgpack';
import { Dealer, Subscriber } from 'zeromq';
import { xxh3 } from '../../src/wasm/index.js';
import type { MockerHandle } from '../../src/mocker/index.js';

export interface JsonResponse {
  status: number;
  json: any; // eslint-disable-line @typescript-eslint/no-explicit-any
}

export async function postJson(
  url: string,
  body: unknown,
  headers: Record<string, string> = {},
): Promise<JsonResponse> {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, json: text === '' ? undefined : JSON.parse(text) };
}

/** Reads an SSE body into its data payloads (without the `data: ` prefix). */
export async function readSse(res: Response): Promise<string[]> {
  const text = await res.text();
  return text
    .split('\n\n')
    .filter((e) => e.startsWith('data: '))
    .map((e) => e.slice(6));
}

/** The engine block hash the mocker publishes for a sequence hash under `seed`. */
export function engineHash(seqHash: bigint, seed: bigint): bigint {
  const b = new Uint8Array(8);
  new DataView(b.buffer).setBigUint64(0, seqHash, true);
  return xxh3(b, seed);
}

/** Probe prompts use token ids in this range (valid for the fallback and Qwen3 vocabularies). */
const PROBE_TOKEN_BASE = 150_000;

export interface EventMessage {
  topic: string;
  seq: bigint;
  payload: Buffer;
  batch: [number, any[], number | null]; // eslint-disable-line @typescript-eslint/no-explicit-any
}

export interface EventStream {
  /** The next batch that is not a warm-up probe; rejects after `timeoutMs`. */
  next(timeoutMs?: number): Promise<EventMessage>;
  close(): void;
}

function isProbe(batch: EventMessage['batch']): boolean {
  return (
    batch[1].length > 0 &&
    batch[1].every((ev) => {
      const tokens = Array.isArray(ev) ? ev[3] : ev.token_ids;
      return (
        Array.isArray(tokens) &&
        tokens.length > 0 &&
        tokens[0] >= PROBE_TOKEN_BASE &&
        tokens[0] < PROBE_TOKEN_BASE + 1000
      );
    })
  );
}

/**
 * Subscribes to one rank's KV events. ZMQ subscriptions reach the publisher
 * asynchronously (slow joiner), so this sends probe requests until one of
 * their batches arrives; probe batches are skipped by `next()` afterwards.
 */
export async function subscribeEvents(m: MockerHandle, rank = 0, topic = ''): Promise<EventStream> {
  const sub = new Subscriber({ receiveTimeout: 150 });
  sub.connect(m.kvEventsEndpoints[rank]!);
  sub.subscribe(topic);
  const bs = m.options.blockSize;
  const deadline = Date.now() + 10_000;
  for (let i = 0; ; i++) {
    const probe = Array.from({ length: bs }, (_, k) => PROBE_TOKEN_BASE + ((i * bs + k) % 1000));
    const r = await postJson(`${m.url}/v1/completions`, { prompt: probe, max_tokens: 1, data_parallel_rank: rank });
    if (r.status !== 200) throw new Error(`probe failed: ${JSON.stringify(r.json)}`);
    try {
      await sub.receive();
      break;
    } catch (err) {
      if (Date.now() > deadline) {
        sub.close();
        throw new Error(`no KV events arrived from ${m.kvEventsEndpoints[rank]}: ${(err as Error).message}`);
      }
    }
  }
  return {
    async next(timeoutMs = 5000): Promise<EventMessage> {
      const until = Date.now() + timeoutMs;
      for (;;) {
        sub.receiveTimeout = Math.max(1, until - Date.now());
        const [t, s, p] = await sub.receive();
        const batch = decode(p!, { useBigInt64: true }) as EventMessage['batch'];
        if (isProbe(batch)) continue;
        return { topic: t!.toString('utf8'), seq: s!.readBigUInt64BE(0), payload: p!, batch };
      }
    },
    close: () => sub.close(),
  };
}

/** Replays from `startSeq` over a DEALER socket; resolves with every [seq, payload] before the end marker. */
export async function replay(endpoint: string, startSeq: bigint): Promise<{ seq: bigint; payload: Buffer }[]> {
  const dealer = new Dealer({ receiveTimeout: 5000, linger: 0 });
  dealer.connect(endpoint);
  const seq = Buffer.alloc(8);
  seq.writeBigUInt64BE(startSeq);
  try {
    await dealer.send([Buffer.alloc(0), seq]);
    const out: { seq: bigint; payload: Buffer }[] = [];
    for (;;) {
      const [empty, s, payload] = await dealer.receive();
      if (empty!.length !== 0) throw new Error('replay reply without the empty delimiter frame');
      const n = s!.readBigUInt64BE(0);
      if (n === 0xffffffffffffffffn) {
        if (payload!.length !== 0) throw new Error('end marker with a payload');
        return out;
      }
      out.push({ seq: n, payload: payload! });
    }
  } finally {
    dealer.close();
  }
}

export { until } from '../helpers/until.js';
