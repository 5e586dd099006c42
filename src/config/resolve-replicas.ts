/**
 * The `replicas` section: replica sync between kvgate replicas over NATS (or a cluster's IPC channel), its
 * NATS connection (servers, and how a lost server is noticed and reconnected), heartbeats, queue and snapshots.
 */
import { GATEWAY_DEFAULTS } from './defaults.js';
import type { ConfigReader } from './reader.js';
import type { GatewayConfig, NatsConnectionConfig } from './types.js';

const NATS_CONNECTION_KEYS = [
  'reconnect_wait_ms',
  'max_reconnect_attempts',
  'ping_interval_ms',
  'max_pings_out',
  'connect_timeout_ms',
] as const;

/**
 * How the NATS client notices a lost server and reconnects. A server that stops answering without closing the
 * connection (a paused process, a partition) is noticed only by pings: after `max_pings_out` unanswered ones,
 * `ping_interval_ms` apart. `max_reconnect_attempts` -1 reconnects forever; a client that gives up closes the
 * connection, and kvgate opens a new one with back-off.
 */
function readNatsConnection(nats: ConfigReader | undefined): NatsConnectionConfig {
  const D = GATEWAY_DEFAULTS.replicaNats;
  if (nats === undefined) return D;
  return {
    reconnectTimeWaitMs: nats.int('reconnect_wait_ms', D.reconnectTimeWaitMs, { min: 10, max: 600_000 }),
    maxReconnectAttempts: nats.int('max_reconnect_attempts', D.maxReconnectAttempts, { min: -1, max: 1_000_000 }),
    pingIntervalMs: nats.int('ping_interval_ms', D.pingIntervalMs, { min: 50, max: 3_600_000 }),
    maxPingsOut: nats.int('max_pings_out', D.maxPingsOut, { min: 1, max: 100 }),
    connectTimeoutMs: nats.int('connect_timeout_ms', D.connectTimeoutMs, { min: 100, max: 600_000 }),
  };
}

function checkNatsUrl(s: string): string | undefined {
  let u: URL;
  try {
    u = new URL(s);
  } catch {
    return 'must be a NATS URL such as nats://10.0.0.5:4222';
  }
  return u.protocol === 'nats:' || u.protocol === 'tls:' ? undefined : 'must be a nats:// (or tls://) URL';
}

export function readReplicas(root: ConfigReader): GatewayConfig['replicas'] {
  const D = GATEWAY_DEFAULTS;
  const r = root.child('replicas');
  r?.allowOnly([
    'nats',
    'router_id',
    'subject_prefix',
    'heartbeat_ms',
    'peer_timeout_ms',
    'max_queued_ops',
    'warm_start',
    'warm_start_timeout_ms',
    'snapshot_chunk_bytes',
    'max_snapshot_bytes',
  ]);
  const nats = r?.child('nats');
  nats?.allowOnly(['servers', ...NATS_CONNECTION_KEYS]);
  const servers: string[] = [];
  nats?.list('servers')?.forEach((u, i) => {
    const why = typeof u === 'string' ? checkNatsUrl(u) : 'must be a string';
    if (why !== undefined) nats.problemAt([...nats.path, 'servers', i], why);
    else servers.push(u as string);
  });
  const heartbeatMs = r?.int('heartbeat_ms', D.replicaHeartbeatMs, { min: 10, max: 600_000 }) ?? D.replicaHeartbeatMs;
  const peerTimeoutMs =
    r?.int('peer_timeout_ms', D.replicaPeerTimeoutMs, { min: 20, max: 3_600_000 }) ?? D.replicaPeerTimeoutMs;
  if (r !== undefined && peerTimeoutMs <= heartbeatMs)
    r.problem('peer_timeout_ms', `must be longer than heartbeat_ms (${heartbeatMs})`);
  const token = (s: string): string | undefined =>
    /^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$/.test(s)
      ? undefined
      : 'must be NATS subject tokens (letters, digits, _ and -, separated by dots)';
  return {
    natsServers: servers,
    natsConnection: readNatsConnection(nats),
    routerId: r?.optStr('router_id', (s) =>
      /^[A-Za-z0-9_.-]{1,128}$/.test(s) ? undefined : 'must be 1 to 128 letters, digits, _, . or -',
    ),
    subjectPrefix: r?.str('subject_prefix', D.replicaSubjectPrefix, token) ?? D.replicaSubjectPrefix,
    heartbeatMs,
    peerTimeoutMs,
    maxQueuedOps: r?.int('max_queued_ops', D.replicaMaxQueuedOps, { min: 1, max: 1 << 24 }) ?? D.replicaMaxQueuedOps,
    ...readSnapshots(r, servers.length > 0),
  };
}

/** Snapshot transfers and the warm start (on by default when NATS is configured: it needs peers on NATS). */
function readSnapshots(
  r: ConfigReader | undefined,
  nats: boolean,
): Pick<GatewayConfig['replicas'], 'warmStart' | 'warmStartTimeoutMs' | 'snapshotChunkBytes' | 'maxSnapshotBytes'> {
  const D = GATEWAY_DEFAULTS;
  const warmStart = r?.bool('warm_start', nats) ?? nats;
  if (r !== undefined && warmStart && !nats)
    r.problem('warm_start', 'needs replicas.nats.servers (or --replica-sync-nats): a warm start asks a peer on NATS');
  const snapshotChunkBytes =
    r?.int('snapshot_chunk_bytes', D.replicaSnapshotChunkBytes, { min: 1024, max: 8 << 20 }) ??
    D.replicaSnapshotChunkBytes;
  const maxSnapshotBytes =
    r?.int('max_snapshot_bytes', D.replicaMaxSnapshotBytes, { min: 1 << 16, max: 1 << 30 }) ??
    D.replicaMaxSnapshotBytes;
  return {
    warmStart,
    snapshotChunkBytes,
    maxSnapshotBytes,
    warmStartTimeoutMs:
      r?.int('warm_start_timeout_ms', D.replicaWarmStartTimeoutMs, { min: 100, max: 600_000 }) ??
      D.replicaWarmStartTimeoutMs,
  };
}
