/**
 * The tenants part of kvgate's metric table (definitions.ts spreads it into the one table). `tenant` is a
 * declared tenant's name or `other`: the label set is bounded by the config, whatever clients send.
 */
import type { MetricDefinition } from './definition-types.js';

export const TENANT_METRIC_DEFINITIONS = {
  // ---- tenants
  tenantAdmitted: {
    kind: 'counter',
    name: 'kvgate_tenant_requests_admitted_total',
    help: "Requests let in by their tenant's rate limits (they go on to routing).",
    labelNames: ['tenant'],
  },
  tenantRateLimited: {
    kind: 'counter',
    name: 'kvgate_tenant_requests_rate_limited_total',
    help: "Requests refused with 429 by their tenant's request or prompt-token rate limit.",
    labelNames: ['tenant'],
  },
  tenantShed: {
    kind: 'counter',
    name: 'kvgate_tenant_requests_shed_total',
    help: 'Requests shed with 529 by the full router queue (refused, or taken out of the queue), by tenant.',
    labelNames: ['tenant'],
  },
  tenantPriorityLimited: {
    kind: 'counter',
    name: 'kvgate_tenant_priority_limits_total',
    help:
      "Client priorities bounded by their tenant's class: hint=engine_priority (the body's priority: " +
      'action=stripped where the class sets no engine_priority, clamped into its range) or priority_jump ' +
      '(nvext.agent_hints.priority: action=clamped to the class max_priority_jump).',
    labelNames: ['tenant', 'hint', 'action'],
  },
  tenantQueued: {
    kind: 'gauge',
    name: 'kvgate_tenant_queued_requests',
    help: "The tenant's requests waiting in the router queues (every model's).",
    labelNames: ['tenant'],
  },
} as const satisfies Record<string, MetricDefinition>;
