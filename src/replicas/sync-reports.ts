/**
 * What replica sync tells the operator beyond the bus's own state (bus-status.ts): an op or a heartbeat's entry
 * too large to send, a peer refused for another block size, and the peers' gauges. Each takes the logger and metrics the gateway
 * bound (undefined before it starts: nothing is reported then).
 */
import type { Logger } from 'pino';
import type { KvgateMetrics } from '../metrics/index.js';
import type { PeerRefusal, SyncChannel } from './channel.js';
import type { UnsentHeartbeatEntry } from './fit.js';
import type { SyncOp } from './protocol.js';

/** An op larger than any message the bus takes: not sent (its sequence number skipped: peers fetch a snapshot). */
export function reportOversizedOp(
  logger: Logger | undefined,
  metrics: KvgateMetrics | undefined,
  channel: string,
  part: { readonly oversized: SyncOp; readonly opBytes: number },
  maxPayload: number | undefined,
): void {
  const op = part.oversized;
  metrics?.replicas.messagesDropped.labels({ direction: 'out', reason: 'too_large' }).inc();
  logger?.warn(
    {
      channel,
      op: op.kind,
      requestId: 'requestId' in op ? op.requestId : op.kind === 'added' ? op.booking.requestId : undefined,
      opBytes: part.opBytes,
      maxPayload,
    },
    "replica sync op larger than the bus's max_payload not sent: peers will take it from a snapshot",
  );
}

/**
 * Heartbeat entries larger than any message the bus takes (a channel key or router id of enormous length, or
 * a `max_payload` below a heartbeat's envelope): not sent, each counted at every heartbeat, logged once per
 * bus bound (a heartbeat leaves every `heartbeat_ms`). Without its channel's sequence a peer learns of a lost
 * batch only from the next batch; without the envelope no heartbeat leaves, and peers time this replica out.
 */
export class UnsentHeartbeats {
  #loggedAt: number | undefined;

  report(
    logger: Logger | undefined,
    metrics: KvgateMetrics | undefined,
    unsent: readonly UnsentHeartbeatEntry[],
    maxPayload: number | undefined,
  ): void {
    if (unsent.length === 0) return;
    metrics?.replicas.messagesDropped.labels({ direction: 'out', reason: 'too_large' }).inc(unsent.length);
    if (logger === undefined || this.#loggedAt === maxPayload) return;
    this.#loggedAt = maxPayload;
    const none = unsent.some((u) => u.entry === 'envelope');
    logger.error(
      { unsent: unsent.map((u) => ({ entry: u.entry, key: u.key, bytes: u.bytes })), maxPayload },
      none
        ? `replica sync heartbeat does not fit the sync bus's max_payload (${maxPayload}): none is sent, peers will time this replica out`
        : `replica sync heartbeat entries larger than the sync bus's max_payload (${maxPayload}) not sent`,
    );
  }
}

/**
 * Peers refused for another block size. Every refused message is counted (`messagesDropped`, `block_size`), every
 * channel that refuses a peer's incarnation once (`peerRefusals`); the error line is once per episode of a peer
 * and a model (its incarnation refused on any of the model's pools): a model of two pools (prefill and decode)
 * refuses a peer on both, one misconfiguration, told once. A new incarnation, or the peer forgotten (timed out),
 * opens a new episode.
 */
export class RefusedPeers {
  /** Per peer and model (`replica\0model`), the incarnation whose refusal was logged. */
  readonly #logged = new Map<string, string>();

  report(logger: Logger | undefined, metrics: KvgateMetrics | undefined, r: PeerRefusal): void {
    metrics?.replicas.messagesDropped.labels({ direction: 'in', reason: 'block_size' }).inc();
    if (!r.first) return;
    metrics?.replicas.peerRefusals.labels({ reason: 'block_size' }).inc();
    const model = r.channel.slice(0, r.channel.lastIndexOf('/'));
    const episode = `${r.replica}\u0000${model}`;
    if (logger === undefined || this.#logged.get(episode) === r.incarnation) return;
    this.#logged.set(episode, r.incarnation);
    logger.error(
      { peer: r.replica, model, channel: r.channel, peerBlockSize: r.theirs, blockSize: r.ours },
      `replica ${r.replica} runs ${model} with block size ${r.theirs}, this replica with ${r.ours}: ` +
        'its bookings are ignored until it restarts with the same block size',
    );
  }

  /** The peer was forgotten: its next refusal is a new episode. */
  forget(replica: string): void {
    for (const key of this.#logged.keys()) if (key.startsWith(`${replica}\u0000`)) this.#logged.delete(key);
  }
}

/** The peers heard from, and per worker rank of each channel the share of its requests in flight that peers booked. */
export function publishPeerGauges(
  metrics: KvgateMetrics,
  peers: number,
  channels: ReadonlyMap<string, SyncChannel>,
  workerTypes: ReadonlyMap<string, (workerId: number) => string>,
): void {
  metrics.replicas.peers.set(peers);
  for (const ch of channels.values()) {
    const model = ch.key.slice(0, ch.key.lastIndexOf('/'));
    const typeOf = workerTypes.get(ch.key)!;
    for (const l of ch.target.loads()) {
      const fromPeers = ch.target.peers.requestsOn(l);
      metrics.replicas.peerLoadShare
        .labels({ model, worker_id: String(l.workerId), dp_rank: String(l.dpRank), worker_type: typeOf(l.workerId) })
        .set(l.activeRequests > 0 ? fromPeers / l.activeRequests : 0);
    }
  }
}
