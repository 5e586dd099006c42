/**
 * The sticky-session part of kvgate's metric table (definitions.ts spreads it into the one table): the bindings
 * held, the limits applied to them, a worker's bindings through its flaps, and the session-start priorities.
 */
import { MW, type MetricDefinition } from './definition-types.js';

export const SESSION_METRIC_DEFINITIONS = {
  sessions: {
    kind: 'gauge',
    name: 'kvgate_router_sessions',
    help: 'Sticky session bindings held (none with session_affinity cost).',
    labelNames: MW,
  },
  sessionLimits: {
    kind: 'counter',
    name: 'kvgate_router_session_limits_total',
    help:
      'Sticky session limits applied: limit=timeout (a requested timeout clamped to the maximum) or capacity (the least ' +
      'recently used binding dropped).',
    labelNames: ['model', 'worker_type', 'limit'],
  },
  sessionPins: {
    kind: 'counter',
    name: 'kvgate_router_session_pins_total',
    help:
      'Sticky session bindings of a worker that went down or left: event=held (marked down: kept, not routed to), ' +
      'returned (up again: routed to again), moved (its session served elsewhere while it was down: bound there), ' +
      'dropped (it left the registry).',
    labelNames: ['model', 'worker_type', 'event'],
  },
  sessionPriorityLimits: {
    kind: 'counter',
    name: 'kvgate_router_session_priority_limits_total',
    help:
      'Session-start priority limits applied: limit=timeout (a requested timeout clamped to the maximum) or capacity ' +
      '(the least recently seen session start dropped: that session counts as new, and younger, when it comes back).',
    labelNames: ['model', 'limit'],
  },
} as const satisfies Record<string, MetricDefinition>;
