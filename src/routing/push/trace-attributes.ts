/**
 * The routing decision as span attributes: the chosen worker, its overlap and,
 * in KV mode, the cost model's inputs for it (the breakdown an operator reads
 * to see why this worker won), with the best overlap among the candidates.
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
