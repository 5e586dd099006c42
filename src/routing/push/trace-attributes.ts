/**
 * The routing decision as span attributes: the chosen worker, its overlap and,
 * in KV mode, the cost model's inputs for it (the breakdown an operator reads
 * to see why this worker won), with the best overlap among the candidates.
 * The same facts make Dynamo's `[ROUTING]` debug line (`routingLogLine`).
 */
import type { Attributes } from '@opentelemetry/api';
import type { Selection } from './types.js';

export function selectionAttributes(mode: 'book' | 'query', sel: Selection): Attributes {
  const out: Attributes = {
    'kvgate.worker_type': sel.worker.role,
    'kvgate.route.mode': mode,
    'kvgate.worker_id': sel.slot.workerId,
    'kvgate.dp_rank': sel.slot.dpRank,
    'kvgate.overlap_blocks': sel.overlapBlocks,
    'kvgate.pinned': sel.pinned,
  };
  const d = sel.decision;
  if (d === undefined) return out;
  const chosen = d.candidates.find((c) => c.workerId === d.workerId && c.dpRank === d.dpRank);
  Object.assign(out, {
    'kvgate.max_overlap_blocks': d.maxOverlapBlocks,
    'kvgate.required_blocks': d.requiredBlocks,
    'kvgate.isl_tokens': d.isl,
    'kvgate.candidates': d.candidateCount,
    'kvgate.temperature': d.temperature,
    'kvgate.queued_ms': d.queuedMs,
    'kvgate.cost': d.cost,
  });
  if (chosen !== undefined) {
    Object.assign(out, {
      'kvgate.cost.prefill_tokens': chosen.prefillTokens,
      'kvgate.cost.decode_blocks': chosen.decodeBlocks,
      'kvgate.cost.active_requests': chosen.activeRequests,
    });
  }
  return out;
}

/**
 * Dynamo's `[ROUTING]` debug line for a decision: the chosen worker and rank, its cached blocks of the prompt's, its
 * cost and the cost's inputs (the span's facts, without their `kvgate.` prefix).
 */
export function routingLogLine(
  requestId: string,
  mode: 'book' | 'query',
  sel: Selection,
): { fields: Record<string, unknown>; msg: string } {
  const fields: Record<string, unknown> = { requestId };
  for (const [k, v] of Object.entries(selectionAttributes(mode, sel))) fields[k.replace(/^kvgate\./, '')] = v;
  const d = sel.decision;
  const cached =
    d === undefined ? `${sel.overlapBlocks} blocks cached` : `${sel.overlapBlocks}/${d.requiredBlocks} blocks cached`;
  const cost = d === undefined ? '' : `, cost ${d.cost.toFixed(3)} of ${d.candidateCount} candidates`;
  const who = `${sel.worker.role} worker ${sel.slot.workerId} dp_rank ${sel.slot.dpRank}`;
  return { fields, msg: `[ROUTING] ${who}: ${cached}${cost}${sel.pinned ? ' (pinned)' : ''}` };
}
