/**
 * `allowedDpRanks` narrows the candidates to some dp ranks of a worker (`kvgate picker`'s, for a data plane's subset
 * naming some of a data-parallel pod's endpoints, one per rank): the other ranks of that worker are never chosen,
 * whatever their load or overlap, a worker it does not name keeps all its ranks, and nothing left is
 * KVG_ERR_NO_WORKERS.
 */
import { describe, expect, it } from 'vitest';
import { ManualClock, seededRng } from '../../../src/common/index.js';
import { KvScheduler, type SchedulingRequest } from '../../../src/core/index.js';
import { promptHashes } from '../../../src/wasm/index.js';
import { kvgateErrorOf } from '../../helpers/kvgate-error.js';

const BS = 4;

function req(requestId: string, base: number, extra: Partial<SchedulingRequest> = {}): SchedulingRequest {
  const tokens = Array.from({ length: 32 }, (_, i) => base + i);
  return { requestId, isl: tokens.length, hashes: promptHashes(tokens, BS), ...extra };
}

describe('allowedDpRanks', () => {
  it('keeps only the ranks it names of a worker, all ranks of a worker it does not name', () => {
    const s = new KvScheduler({ blockSize: BS, clock: new ManualClock(0), rng: seededRng(3) });
    s.addWorker(1, { dataParallelSize: 4, maxNumBatchedTokens: 100 });
    s.addWorker(2, { maxNumBatchedTokens: 100 });
    // Rank 2 of worker 1 alone: every choice is that slot, however loaded it grows.
    const only = { allowedWorkerIds: [1], allowedDpRanks: new Map([[1, new Set([2])]]) };
    for (let i = 0; i < 8; i++) expect(s.select(req(`a${i}`, 100 * i, only))).toMatchObject({ workerId: 1, dpRank: 2 });
    // Worker 2 is not narrowed: with rank 2 of worker 1 that busy, the other worker's one rank is chosen.
    const two = { allowedWorkerIds: [1, 2], allowedDpRanks: new Map([[1, new Set([2])]]) };
    expect(s.select(req('b', 5000, two), 'query')).toMatchObject({ workerId: 2, dpRank: 0 });
    // The ranks alone narrow too; a rank the worker does not have leaves nothing.
    const ranks = {
      allowedDpRanks: new Map([
        [1, new Set([0, 3])],
        [2, new Set<number>()],
      ]),
    };
    for (let i = 0; i < 8; i++) expect([0, 3]).toContain(s.select(req(`c${i}`, 9000 + 100 * i, ranks)).dpRank);
    const none = { allowedWorkerIds: [1], allowedDpRanks: new Map([[1, new Set([7])]]) };
    const err = kvgateErrorOf(() => s.select(req('d', 20_000, none)));
    expect(err).toMatchObject({
      code: 'KVG_ERR_NO_WORKERS',
      message: 'none of the allowed workers and dp ranks is registered',
    });
  });
});
