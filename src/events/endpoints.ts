/**
 * Endpoint arithmetic of engine KV-event publishers: with data parallelism
 * every rank runs its own publisher, on the base
 * tcp port + rank (replay port likewise), or with `_dp<rank>` appended for
 * inproc endpoints, as vLLM's `offset_endpoint_port` does. An ipc:// path
 * serves rank 0 only (a path has no port to offset).
 */
import { KvgateError } from '../errors/index.js';

/** The endpoint of dp rank `dpRank` given the engine's configured (rank 0) endpoint. */
export function dpRankEndpoint(endpoint: string, dpRank: number): string {
  if (!Number.isInteger(dpRank) || dpRank < 0 || dpRank > 0xffff) {
    throw new KvgateError('KVG_ERR_INVALID_CONFIG', `dp rank ${dpRank} is not an integer in [0, 65535]`, { dpRank });
  }
  if (endpoint.startsWith('inproc://')) return dpRank === 0 ? endpoint : `${endpoint}_dp${dpRank}`;
  // An ipc:// path has no port to offset: rank 0 (every engine without data parallelism) is the endpoint itself.
  if (dpRank === 0 && endpoint.startsWith('ipc://')) return endpoint;
  const m = /^(tcp:\/\/.+):(\d+)$/.exec(endpoint);
  if (m === null) {
    throw new KvgateError(
      'KVG_ERR_INVALID_CONFIG',
      `KV event endpoint ${JSON.stringify(endpoint)} is neither tcp://host:port nor inproc://`,
      { endpoint },
    );
  }
  const port = Number(m[2]) + dpRank;
  if (port > 65535)
    throw new KvgateError(
      'KVG_ERR_INVALID_CONFIG',
      `KV event endpoint ${endpoint} offset by dp rank ${dpRank} exceeds port 65535`,
      { endpoint, dpRank },
    );
  return `${m[1]}:${port}`;
}

/**
 * An engine's bind address (`tcp://*:5557`, `tcp://0.0.0.0:5557`,
 * `tcp://[::]:5557`) as the router connects to it on `host`. Other endpoints
 * are returned unchanged.
 */
export function connectEndpoint(endpoint: string, host: string): string {
  const m = /^tcp:\/\/(\*|0\.0\.0\.0|\[::\]|::):(\d+)$/.exec(endpoint);
  if (m === null) return endpoint;
  const h = host.includes(':') && !host.startsWith('[') ? `[${host}]` : host;
  return `tcp://${h}:${m[2]}`;
}
