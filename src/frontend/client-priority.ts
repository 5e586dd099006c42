/**
 * The priorities a client asks for, bounded by its tenant's class before the request is routed: what one client
 * may take from the others' share of the fleet is the operator's to grant, not the client's.
 *
 * Engine `priority` (the top-level field of vLLM's chat, completion, embeddings and Responses requests, and
 * SGLang's): engines in priority scheduling admit the lowest value first (vLLM; SGLang the highest unless
 * `--schedule-low-priority-values-first`, and a request without one there comes after every request with one),
 * and preempt running requests for it. A client's value outranks every other tenant's request inside the engine,
 * whatever the router queue decided. So:
 * - a class without `engine_priority` (the default): the client's `priority` is taken out of the body; kvgate's own
 *   `session_priority`, when the model has it, then applies as to any request without one;
 * - a class with `engine_priority: {min, max}`: the value is clamped into the range (an integer is required).
 *
 * Router-queue priority (`nvext.agent_hints.priority`, Dynamo's; `RoutingHints.priorityJump`, in seconds): it moves
 * a request ahead in the router queue, among the requests of its own tenant (one queue per tenant: every undeclared
 * client shares `other`, and without `tenants` every client does). Unbounded, one request went ahead of everything
 * queued; the class's `max_priority_jump` clamps it, so under `fcfs` a queued request is overtaken only by requests
 * that arrive within that many seconds after it.
 *
 * Each change is told to `onLimit` (the tenant's count).
 */
import { withJsonMembers, type RoutingHints } from '../common/index.js';
import type { TenantClassConfig } from '../config/index.js';
import { KvgateError } from '../errors/index.js';

/** What was done to a client's priority: taken out, or moved into its class's range. */
export type PriorityLimitAction = 'stripped' | 'clamped';

/**
 * `body` with its `priority` as `cls` allows: the same object when nothing changes.
 * @throws KvgateError KVG_ERR_INVALID_REQUEST (param `priority`) for a value that is not an integer, where the
 *   class forwards one (the chat, completion and embeddings schemas already require an integer).
 */
export function boundEnginePriority(
  body: Readonly<Record<string, unknown>>,
  cls: Pick<TenantClassConfig, 'name' | 'enginePriority'>,
  onLimit: (action: PriorityLimitAction) => void,
): Readonly<Record<string, unknown>> {
  if (!Object.hasOwn(body, 'priority')) return body;
  const range = cls.enginePriority;
  if (range === undefined) {
    onLimit('stripped');
    return withJsonMembers(body, { priority: undefined });
  }
  const v = body['priority'];
  if (typeof v !== 'number' || !Number.isSafeInteger(v))
    throw new KvgateError('KVG_ERR_INVALID_REQUEST', 'priority must be an integer', { param: 'priority' });
  const clamped = Math.min(range.max, Math.max(range.min, v));
  if (clamped === v) return body;
  onLimit('clamped');
  return withJsonMembers(body, { priority: clamped });
}

/** `hints` with `priorityJump` at most `cls`'s `maxPriorityJump`: the same object when nothing changes. */
export function boundPriorityJump(
  hints: RoutingHints,
  cls: Pick<TenantClassConfig, 'maxPriorityJump'>,
  onLimit: (action: PriorityLimitAction) => void,
): RoutingHints {
  const jump = hints.priorityJump;
  if (jump === undefined || jump <= cls.maxPriorityJump) return hints;
  onLimit('clamped');
  return { ...hints, priorityJump: cls.maxPriorityJump };
}
