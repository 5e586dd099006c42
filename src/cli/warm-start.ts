/**
 * `kvgate serve`'s warm start of a new replica: before a model's router
 * subscribes to its engines, each KV pool's prefix index (and the bookings
 * and sessions, applied as the pools attach) from a live peer on NATS.
 */
import type { KvSlotSnapshot } from '../common/index.js';
import type { GatewayConfig, ModelConfig } from '../config/index.js';
import { channelKey, type ReplicaSync } from '../replicas/index.js';

/**
 * A new replica's warm start of one model (before its router subscribes to the engines): each KV
 * pool's prefix index from a live peer, by channel; bookings and sessions reach the channels as
 * they attach. Undefined when off, and for pools no peer answered for (they start cold).
 */
export async function warmStartModel(model: ModelConfig, config: GatewayConfig, sync: ReplicaSync | undefined): Promise<Map<string, KvSlotSnapshot[]> | undefined> {
  if (sync === undefined || !config.replicas.warmStart || model.routerMode !== 'kv') return undefined;
  const roles = model.workers.some((w) => w.role === 'prefill') ? ['decode', 'prefill'] : ['decode'];
  return sync.warmStart(roles.map((r) => channelKey(model.name, r)), config.replicas.warmStartTimeoutMs);
}
