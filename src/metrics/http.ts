/**
 * The HTTP edge's series (`kvgate_http_*` but the request duration), written
 * by src/frontend/server.ts.
 */
import { Counter, Gauge, type Registry } from 'prom-client';

export interface HttpEdgeMetrics {
  readonly requests: Counter<'route' | 'status'>;
  readonly rejections: Counter<'code'>;
  readonly clientAddressFallbacks: Counter<'reason'>;
  readonly connectionsRefused: Counter<'limit'>;
  readonly pendingConnections: Gauge;
  readonly clientsAtRequestBound: Gauge;
  readonly inflight: Gauge;
}

/** `collect` runs the scrape hooks (`KvgateMetrics.onScrape`), which write the pending connections. */
export function httpEdgeMetrics(registers: Registry[], collect: () => void): HttpEdgeMetrics {
  return {
    requests: new Counter({
      name: 'kvgate_http_requests_total',
      help: 'HTTP requests by route and status.',
      labelNames: ['route', 'status'],
      registers,
    }),
    rejections: new Counter({
      name: 'kvgate_http_rejections_total',
      help: 'Requests rejected at the edge, by error code.',
      labelNames: ['code'],
      registers,
    }),
    clientAddressFallbacks: new Counter({
      name: 'kvgate_http_client_address_fallbacks_total',
      labelNames: ['reason'],
      registers,
      help:
        "Requests from a trusted proxy that the per-client bound counted as the proxy's own: its forwarding header was missing " +
        'or named no address (reason missing|invalid).',
    }),
    connectionsRefused: new Counter({
      name: 'kvgate_http_connections_refused_total',
      labelNames: ['limit'],
      registers,
      help:
        'Client connections closed at accept, unanswered, by the bound they were over ' +
        '(limit max_connections|max_connections_per_client).',
    }),
    pendingConnections: new Gauge({
      name: 'kvgate_http_pending_connections',
      registers,
      collect,
      help:
        'Connections whose request has not fully arrived (headers or body still coming), which ' +
        'limits.max_pending_connections_per_client bounds per client.',
    }),
    clientsAtRequestBound: new Gauge({
      name: 'kvgate_http_clients_at_request_bound',
      registers,
      help:
        'Clients holding limits.max_concurrent_requests_per_client requests in flight (their next ones get 429); ' +
        '0 while there is no such bound.',
    }),
    inflight: new Gauge({ name: 'kvgate_http_inflight_requests', help: 'Requests being served.', registers }),
  };
}
