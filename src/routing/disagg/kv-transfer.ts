/**
 * vLLM's `kv_transfer_params` handoff: the prefill runs to completion (one
 * token, stream off), its answer carries the transfer ticket, and decode is
 * dispatched with the ticket verbatim. The prefill engine's prompt-cache
 * usage is handed to the client's answer (it computed the prompt).
 */
import { readVllmPrefillResult, vllmDecodeLegFields, vllmPrefillLegFields } from '../../engines/index.js';
import type { LegRequest, LegResponse, Selection } from '../push/types.js';
import type { Handoff, PrefillInFlight } from './strategy.js';
import type { DisaggOutcome } from './types.js';

export function kvTransferHandoff(base: LegRequest, target: Selection): Handoff {
  return {
    path: 'sync',
    prefillFields: vllmPrefillLegFields(base.body, { requestId: base.clientRequestId ?? base.requestId }),
    async handOver(p: PrefillInFlight): Promise<DisaggOutcome> {
      p.setEnded(
        p.response.then(
          () => undefined,
          () => undefined,
        ),
      );
      let res: LegResponse;
      try {
        res = await p.response;
      } catch (err) {
        throw p.fail(err);
      } finally {
        p.releasePermit();
      }
      p.answered(res);
      // The engine refused the request itself (a client error): the client gets the engine's answer.
      if (res.status >= 400) return p.refused(res);
      let ticket: ReturnType<typeof readVllmPrefillResult>;
      try {
        ticket = readVllmPrefillResult(res.body.kind === 'json' ? res.body.json : undefined, {
          worker: `${target.worker.id} (${target.worker.url})`,
          workerId: target.worker.id,
        });
      } catch (err) {
        throw p.fail(err);
      }
      p.tracker.recordPrefillComplete();
      return p.decode(
        vllmDecodeLegFields({
          requestId: base.clientRequestId ?? base.requestId,
          kvTransferParams: ticket.kvTransferParams,
        }),
        ticket.promptTokensDetails,
      );
    },
  };
}
