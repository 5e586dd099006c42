/**
 * Warm start: before a new replica's routers subscribe to the engines' KV
 * events, it asks one live peer (the warm-start queue group of each channel)
 * for a snapshot of that channel's bookings, sessions and prefix index, the
 * index with the KV-event cursor of every slot. Bounded in time as a whole:
 * no bus, no peer, a failed or oversized transfer all start that channel cold,
 * logged and counted; the replica then learns from the engines alone.
 *
 * Only a replica whose index is as complete as any can be answers others' warm
 * starts: one that took a peer's snapshot, or one that found no peer to ask
 * (the first of its fleet). A replica that started cold beside live peers
 * (its warm start off or failed) knows only what the engines' short replay
 * buffers gave it; were it to answer, a newcomer would start as blind as it.
 */
import type { Logger } from 'pino';
import type { Clock, KvSlotSnapshot } from '../common/index.js';
import type { ReplicaMetrics } from '../metrics/index.js';
import type { Snapshot } from './protocol.js';
import { channelKey } from './protocol.js';
import type { ReplicaSync } from './replica-sync.js';
import { transferOutcome } from './transfer.js';
import { NoResponders } from './transport.js';

export interface WarmStartResult {
  readonly snapshot: Snapshot;
}

export interface WarmStartOutcome {
  /** The snapshot of each channel a peer gave; a channel missing here starts cold. */
  readonly snapshots: Map<string, WarmStartResult>;
  /** The channels whose index is complete (a peer's snapshot taken, or no peer there): this replica answers their warm starts. */
  readonly complete: Set<string>;
}

export interface WarmStartOptions {
  readonly keys: readonly string[];
  readonly timeoutMs: number;
  readonly clock: Clock;
  readonly logger: Logger | undefined;
  readonly metrics: ReplicaMetrics | undefined;
  /** Resolves true once the bus is connected, false after `ms` without. */
  connected(ms: number): Promise<boolean>;
  fetch(key: string): Promise<{ snapshot: Snapshot; bytes: number; seconds: number }>;
  /** The model's KV block size: a peer's snapshot with another one is refused (its index means nothing here). */
  readonly blockSize?: number | undefined;
}

class WarmStartTimeout extends Error {}

function within<T>(p: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new WarmStartTimeout(`no complete snapshot within ${ms} ms`)), ms);
  });
  return Promise.race([p, timeout]).finally(() => clearTimeout(timer));
}

export async function warmStart(d: WarmStartOptions): Promise<WarmStartOutcome> {
  const started = d.clock.now();
  const out = new Map<string, WarmStartResult>();
  const complete = new Set<string>();
  const cold = (key: string, outcome: 'no_peer' | 'failed' | 'too_large' | 'refused', why: string): void => {
    d.metrics?.snapshots.labels({ direction: 'warm_start', outcome }).inc();
    d.logger?.warn(
      { channel: key, outcome, err: why },
      `warm start of ${key}: ${why}; starting cold (the prefix index fills from the engines' KV events)`,
    );
  };
  if (!(await d.connected(d.timeoutMs))) {
    for (const key of d.keys) cold(key, 'no_peer', `replica sync bus not connected within ${d.timeoutMs} ms`);
    return { snapshots: out, complete };
  }
  for (const key of d.keys) {
    const left = d.timeoutMs - (d.clock.now() - started);
    try {
      if (left <= 0) throw new WarmStartTimeout(`no time left of ${d.timeoutMs} ms`);
      const { snapshot: s, bytes, seconds } = await within(d.fetch(key), left);
      if (d.blockSize !== undefined && s.blockSize !== undefined && s.blockSize !== d.blockSize) {
        cold(key, 'refused', `replica ${s.routerId} runs block size ${s.blockSize}, this replica ${d.blockSize}`);
        continue;
      }
      const slots = s.slots ?? [];
      // Every storage tier's blocks and a hybrid model's other KV-cache groups' (each a (block, slot) entry seeded).
      const blocks = slots.reduce((n, slot) => n + pairCount(slot.tiers) + pairCount(slot.groups ?? []), 0);
      d.metrics?.snapshots.labels({ direction: 'warm_start', outcome: 'ok' }).inc();
      d.metrics?.snapshotBlocks.inc(blocks);
      d.metrics?.snapshotSeconds.labels({ direction: 'warm_start' }).observe(seconds);
      d.logger?.info(
        {
          channel: key,
          peer: s.routerId,
          bookings: s.bookings.length,
          sessions: s.sessions.length,
          slots: slots.length,
          blocks,
          bytes,
          seconds,
        },
        `warm start of ${key}: snapshot of replica ${s.routerId} ` +
          `(${blocks} block(s) over ${slots.length} worker rank(s), ${s.bookings.length} booking(s), ${bytes} bytes)`,
      );
      out.set(key, { snapshot: s });
      complete.add(key);
    } catch (err) {
      if (err instanceof NoResponders) {
        cold(key, 'no_peer', 'no live replica answered');
        complete.add(key);
      } else {
        cold(key, err instanceof WarmStartTimeout ? 'failed' : transferOutcome(err), (err as Error).message);
      }
    }
  }
  return { snapshots: out, complete };
}

/**
 * A new replica's warm start of one model, before its router subscribes to the engines: each of its KV pools'
 * prefix index (by role) from a live peer, keyed by channel; bookings and sessions reach the channels as they
 * attach. Pools no peer answered for start cold (absent from the map).
 */
export function warmStartModel(
  sync: ReplicaSync,
  model: string,
  roles: readonly string[],
  timeoutMs: number,
  blockSize?: number,
): Promise<Map<string, KvSlotSnapshot[]>> {
  return sync.warmStart(
    roles.map((r) => channelKey(model, r)),
    timeoutMs,
    blockSize,
  );
}

/** The (engine hash, sequence hash) pairs of a slot's tiers or groups: the blocks they carry. */
function pairCount(parts: readonly { readonly pairs: BigUint64Array }[]): number {
  let n = 0;
  for (const p of parts) n += p.pairs.length / 2;
  return n;
}
