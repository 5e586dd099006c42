/**
 * The etcd client of both ends of etcd discovery: the gateway's
 * `EtcdWorkersSource` and `kvgate register`. Both retry on their own
 * schedule (`Backoff`: exponential, with jitter), so the client is set up to
 * fail an attempt promptly and to leave the pacing to them:
 *
 * - Unary calls (list, grant, put, revoke) carry a deadline: an etcd that
 *   accepts connections but does not answer fails the attempt instead of
 *   holding it forever. Streams (watch, keep-alive) get theirs from the caller.
 * - gRPC keep-alive pings run on open streams, so a watch whose etcd vanished
 *   without closing the connection is noticed (etcd accepts pings every 5 s
 *   or slower by default).
 * - etcd3's per-host circuit breaker is replaced by a pass-through. After
 *   three failed calls it refuses every call for 5 s, which would hold back
 *   the first keep-alive after etcd returns past a short lease's TTL (a lease
 *   outlives an etcd restart only by its TTL). etcd3's global policy stays: up
 *   to three tries, each on the next endpoint of the list.
 */
import { Etcd3, type IOptions } from 'etcd3';

/** How long a unary call to etcd may take before the attempt fails. */
export const ETCD_CALL_TIMEOUT_MS = 5_000;

type HostPolicy = ReturnType<NonNullable<NonNullable<IOptions['faultHandling']>['host']>>;

/** Runs each call once, as it comes: what cockatiel's `noop` policy does (etcd3's documented way to turn it off). */
function passThrough(): HostPolicy {
  const none = { dispose: (): void => undefined };
  const policy = {
    onSuccess: () => none,
    onFailure: () => none,
    execute: async <T>(
      fn: (context: { signal: AbortSignal }) => PromiseLike<T> | T,
      signal?: AbortSignal,
    ): Promise<T> => fn({ signal: signal ?? new AbortController().signal }),
  };
  // `_altReturn` is a type-only member of the interface ("will not actually be defined").
  return policy as unknown as HostPolicy;
}

/** A client of the cluster at `endpoints` (http(s)://host:port) with the settings above. */
export function etcdClient(endpoints: readonly string[]): Etcd3 {
  return new Etcd3({
    hosts: [...endpoints],
    defaultCallOptions: (context) => (context.isStream ? {} : { deadline: Date.now() + ETCD_CALL_TIMEOUT_MS }),
    grpcOptions: { 'grpc.keepalive_time_ms': 10_000, 'grpc.keepalive_timeout_ms': 5_000 },
    faultHandling: { host: passThrough },
  });
}
