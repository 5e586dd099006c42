/**
 * Replica sync's metrics (`kvgate_replica_*`, and the share of each worker's
 * load booked by peer replicas). Registered with every gateway's metrics, so
 * /metrics lists them whether or not sync is on.
 */
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';

export interface ReplicaMetrics {
  readonly peers: Gauge;
  readonly busUp: Gauge;
  readonly busTransitions: Counter<'transition'>;
  readonly messagesSent: Counter<'kind'>;
  readonly messagesReceived: Counter<'kind'>;
  readonly messagesDropped: Counter<'direction' | 'reason'>;
  readonly opsApplied: Counter<'op' | 'outcome'>;
  readonly lag: Histogram;
  readonly snapshots: Counter<'direction' | 'outcome'>;
  readonly snapshotBytes: Counter<'direction'>;
  readonly snapshotBlocks: Counter;
  readonly snapshotSeconds: Histogram<'direction'>;
  readonly peerTimeouts: Counter;
  readonly routerIdConflicts: Counter;
  readonly peerRefusals: Counter<'reason'>;
  readonly peerLoadShare: Gauge<'model' | 'worker_id' | 'dp_rank' | 'worker_type'>;
}

/** Builds the replica sync series into `registers`. */
export function replicaMetrics(registers: Registry[]): ReplicaMetrics {
  return {
    peers: new Gauge({
      name: 'kvgate_replica_peers',
      help: 'Other router replicas heard from within the peer timeout.',
      registers,
    }),
    busUp: new Gauge({
      name: 'kvgate_replica_sync_bus_up',
      help: 'With replica sync on: 1 while this replica is connected to its sync bus (NATS), 0 while it is not.',
      registers,
    }),
    busTransitions: new Counter({
      name: 'kvgate_replica_sync_bus_transitions_total',
      help:
        'The sync bus (NATS) connection of this replica, by transition (connected, disconnected, closed: the client ' +
        'closed the connection for good and a new one is being opened).',
      labelNames: ['transition'],
      registers,
    }),
    messagesSent: new Counter({
      name: 'kvgate_replica_sync_messages_sent_total',
      help: 'Replica sync messages published, by kind (ops|heartbeat|snapshot).',
      labelNames: ['kind'],
      registers,
    }),
    messagesReceived: new Counter({
      name: 'kvgate_replica_sync_messages_received_total',
      help: 'Replica sync messages received from peers, by kind (ops|heartbeat|snapshot).',
      labelNames: ['kind'],
      registers,
    }),
    messagesDropped: new Counter({
      name: 'kvgate_replica_sync_messages_dropped_total',
      help:
        'Replica sync messages or ops dropped: direction=out (queue_full, disconnected, publish_failed, too_large: ' +
        "an op or a heartbeat entry larger than the bus's max_payload) or in (malformed, stale, apply_failed, block_size: from a peer " +
        'refused for another block size).',
      labelNames: ['direction', 'reason'],
      registers,
    }),
    opsApplied: new Counter({
      name: 'kvgate_replica_sync_ops_applied_total',
      help:
        "Peer bookkeeping ops applied to this replica's view, by op and outcome (applied, duplicate, unknown_worker, " +
        'unknown_request, adopted, kept).',
      labelNames: ['op', 'outcome'],
      registers,
    }),
    lag: new Histogram({
      name: 'kvgate_replica_sync_lag_seconds',
      help:
        "Age of a peer's batch when this replica applies it, on this replica's own clock: the peer's send time is mapped onto it " +
        "through the clock offset that heartbeat round trips give, so skew between the replicas' clocks does not enter it " +
        "(error at most half a round trip's asymmetry). Not observed before the first heartbeat round trip with that peer.",
      buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
      registers,
    }),
    ...snapshotMetrics(registers),
    ...peerMetrics(registers),
  };
}

/** The peers' series: timeouts, router id conflicts, refusals, and their share of each worker's load. */
function peerMetrics(
  registers: Registry[],
): Pick<ReplicaMetrics, 'peerTimeouts' | 'routerIdConflicts' | 'peerRefusals' | 'peerLoadShare'> {
  return {
    peerTimeouts: new Counter({
      name: 'kvgate_replica_peer_timeouts_total',
      help: 'Peers dropped (with all their bookings) after not being heard from within the peer timeout.',
      registers,
    }),
    routerIdConflicts: new Counter({
      name: 'kvgate_replica_router_id_conflicts_total',
      help:
        'Router ids found shared by two live replicas (this one and another, or two peers), each reported once: ' +
        "their bookings overwrite each other's.",
      registers,
    }),
    peerRefusals: new Counter({
      name: 'kvgate_replica_peer_refusals_total',
      help:
        "Peers (per incarnation and channel) whose bookings this replica ignores, by reason (block_size: the model's " +
        'KV block size differs, so their prompt hashes mean nothing here). Logged as an error once per peer and model.',
      labelNames: ['reason'],
      registers,
    }),
    peerLoadShare: new Gauge({
      name: 'kvgate_worker_peer_load_share',
      help: 'Share of the requests in flight on the worker rank that peer replicas booked (0 when idle).',
      labelNames: ['model', 'worker_id', 'dp_rank', 'worker_type'],
      registers,
    }),
  };
}

/** The snapshot transfers' series: served, fetched and warm-start transfers, their bytes, blocks and durations. */
function snapshotMetrics(
  registers: Registry[],
): Pick<ReplicaMetrics, 'snapshots' | 'snapshotBytes' | 'snapshotBlocks' | 'snapshotSeconds'> {
  return {
    snapshots: new Counter({
      name: 'kvgate_replica_snapshot_transfers_total',
      help:
        "Snapshot transfers: direction=served (to a peer), fetched (a peer's live bookings) or warm_start (a peer's " +
        'bookings and prefix index at start-up), by outcome (ok, stale, failed, too_large, no_peer, refused: another block size).',
      labelNames: ['direction', 'outcome'],
      registers,
    }),
    snapshotBytes: new Counter({
      name: 'kvgate_replica_snapshot_bytes_total',
      help: 'Bytes of snapshot transfers (all chunks), direction=served or received.',
      labelNames: ['direction'],
      registers,
    }),
    snapshotBlocks: new Counter({
      name: 'kvgate_replica_snapshot_blocks_received_total',
      help:
        "Prefix-index blocks (per worker rank) received in warm-start snapshots: every storage tier's and a hybrid " +
        "model's every KV-cache group's.",
      registers,
    }),
    snapshotSeconds: new Histogram({
      name: 'kvgate_replica_snapshot_transfer_seconds',
      help: 'Duration of a completed snapshot transfer from a peer (all its chunks), direction=fetched or warm_start.',
      labelNames: ['direction'],
      buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
      registers,
    }),
  };
}
