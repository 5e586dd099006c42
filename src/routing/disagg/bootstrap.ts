/**
 * SGLang's bootstrap handoff: prefill and decode both get the same
 * (host, port, room) triple and meet at the prefill worker's bootstrap
 * server. The prefill is dispatched in the background; once its engine has
 * the request, decode is dispatched. It never waits for prefill output:
 * SGLang's prefill completes only after decode has connected.
 */
import type { Rng } from '../../common/index.js';
import { sglangDecodeLegFields, sglangPrefillLegFields } from '../../engines/index.js';
import type { LegRequest, LegResponse, Selection } from '../push/types.js';
import { bootstrapFor } from './handoff.js';
import type { Handoff, PrefillInFlight } from './strategy.js';
import { prefillFailure, type DisaggOutcome } from './types.js';

export function bootstrapHandoff(base: LegRequest, target: Selection, rng: Rng): Handoff {
  const w = target.worker;
  const bootstrap = bootstrapFor(w, target.slot.dpRank, rng);
  return {
    path: 'bootstrap',
    prefillFields: sglangPrefillLegFields(base.body, { bootstrap }),
    async handOver(p: PrefillInFlight): Promise<DisaggOutcome> {
      p.setEnded(
        p.response
          .then(
            (res) => prefillDone(p, res),
            (err: unknown) => void p.fail(err),
          )
          .finally(() => p.prefillLegOver()),
      );
      await p.accepted.catch(() => {
        throw p.error ?? prefillFailure(new Error('the prefill leg ended before it was dispatched'), target);
      });
      // The room already encodes the prefill rank; newer SGLang decode builds also read it directly
      // (`disagg_prefill_dp_rank`), which matters when prefill and decode DP sizes differ.
      const prefillDpRank = w.dpSize > 1 ? { prefillDpRank: target.slot.dpRank - w.dpStart } : {};
      return p.decode(sglangDecodeLegFields({ bootstrap, ...prefillDpRank }), undefined);
    },
  };
}

/** The prefill answered (after decode connected): a refusal (4xx) is the client's answer, else the prefill is complete. */
function prefillDone(p: PrefillInFlight, res: LegResponse): void {
  p.answered(res);
  // Engine 5xx answers are thrown by the push router; a status here at or above 400 is the engine's own refusal.
  if (res.status >= 400) {
    p.refuse(res);
    return;
  }
  p.tracker.recordPrefillComplete();
}
