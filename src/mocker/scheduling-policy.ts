/**
 * vLLM's two scheduling policies over the engine core's queues: which waiting request is admitted next and
 * which running request is preempted when the KV cache runs short.
 *
 * - `fcfs`: waiting requests in arrival order, a preempted one back at the head; the victim is the running
 *   request admitted last.
 * - `priority`: waiting requests in (priority, arrival) order, lowest first; the victim is the running request
 *   of the highest (priority, arrival). A preempted request keeps its arrival, so it goes back ahead of later
 *   arrivals of its priority.
 */
import type { SchedulingPolicy } from './engine-types.js';
import type { RequestEntry } from './request-entry.js';

/** Whether `a` comes after `b` in the `priority` order: a higher priority value, or a later arrival. */
function later(a: RequestEntry, b: RequestEntry): boolean {
  return a.priority > b.priority || (a.priority === b.priority && a.addedAt > b.addedAt);
}

/** Puts `r` into `waiting` where `policy` admits it; under `priority`, after the requests of its key already there. */
export function enqueue(waiting: RequestEntry[], r: RequestEntry, preempted: boolean, policy: SchedulingPolicy): void {
  if (policy === 'fcfs') {
    if (preempted) waiting.unshift(r);
    else waiting.push(r);
    return;
  }
  let lo = 0;
  let hi = waiting.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (!later(waiting[mid]!, r)) lo = mid + 1;
    else hi = mid;
  }
  waiting.splice(lo, 0, r);
}

/** The index in `running` (not empty) of the request `policy` preempts. */
export function victimIndex(running: readonly RequestEntry[], policy: SchedulingPolicy): number {
  let v = running.length - 1;
  if (policy === 'fcfs') return v;
  for (let j = v - 1; j >= 0; j--) if (later(running[j]!, running[v]!)) v = j;
  return v;
}
