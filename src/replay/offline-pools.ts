/**
 * The engines and routers of one offline run: a pool per role (its workers,
 * router and load timeline) and one virtual engine per worker, whose KV
 * events feed its pool's router when the step that produced them completes.
 */
import { seededRng, type Clock, type Rng, type WorkerRole } from '../common/index.js';
import {
  EngineCore,
  engineCoreOptions,
  stepCostModelOf,
  VirtualEngine,
  type FilledMockerOptions,
  type StepResult,
} from '../mocker/index.js';
import type { OfflineReplayOptions } from './offline.js';
import { policySeed, seedName, type ReplayRouter } from './policy.js';
import type { PoolRun } from './results.js';
import { SINGLE_ROUTER } from './router-replicas.js';
import { createPoolRouter } from './routers.js';
import { LoadTimeline } from './timeline.js';

/** Generated tokens are drawn from this many ids (their values do not matter to routing). */
const SAMPLE_VOCAB = 1024;

export interface Engine {
  readonly workerId: number;
  /** Position in its pool (load timeline row). */
  readonly row: number;
  readonly pool: PoolState;
  readonly ve: VirtualEngine;
}

export interface PoolState {
  readonly name: PoolRun['name'];
  readonly workerIds: number[];
  readonly timeline: LoadTimeline;
  readonly router: ReplayRouter;
}

/** 32-bit mix of (seed, request index): each request's generated tokens have their own stream. */
export function generationSeed(seed: number, index: number): number {
  let h = Math.imul((seed ^ 0x9e3779b9) >>> 0, 0x85ebca6b) ^ index;
  h = Math.imul(h ^ (h >>> 16), 0x7feb352d);
  return (h ^ (h >>> 15)) >>> 0;
}

/** The pools of a topology (aggregated: `engines`; P/D: `prefill` then `decode`), each with its router, and one engine per worker. */
export function buildPools(
  opts: OfflineReplayOptions,
  clock: Clock,
  bucketMs: number,
): { pools: PoolState[]; engines: Engine[] } {
  const { policy, engine: eng, seed, topology } = opts;
  const pools: PoolState[] = [];
  let nextWorkerId = 0;
  const addPool = (name: PoolRun['name'], size: number, role: WorkerRole): void => {
    const workerIds = Array.from({ length: size }, () => nextWorkerId++);
    // Replica 0 draws what a single router draws, so one replica reproduces a run without replicas.
    const rngOf = (i: number): Rng =>
      seededRng(policySeed(seed, i === 0 ? seedName(policy) : `${seedName(policy)}#replica${i}`) + pools.length);
    const router = createPoolRouter(
      policy,
      {
        role,
        workerIds,
        blockSize: eng.blockSize,
        clock,
        maxNumBatchedTokens: eng.maxNumBatchedTokens,
        totalKvBlocks: eng.numGpuBlocks,
        stepCost: stepCostModelOf(eng.timing),
      },
      opts.replicas ?? SINGLE_ROUTER,
      rngOf,
    );
    pools.push({ name, workerIds, timeline: new LoadTimeline(size, bucketMs), router });
  };
  if (topology.kind === 'aggregated') addPool('engines', topology.workers, 'aggregated');
  else {
    addPool('prefill', topology.prefillWorkers, 'prefill');
    addPool('decode', topology.decodeWorkers, 'decode');
  }
  return { pools, engines: buildEngines(eng, pools) };
}

/** One engine core per worker, each hashing under its own seed (as separate vLLM processes do); its KV events go to its pool's router. */
function buildEngines(eng: FilledMockerOptions, pools: readonly PoolState[]): Engine[] {
  const engines: Engine[] = [];
  const sampleTokenIds = Uint32Array.from({ length: SAMPLE_VOCAB }, (_, i) => i);
  for (const pool of pools) {
    pool.workerIds.forEach((workerId, row) => {
      const base = engineCoreOptions(eng, sampleTokenIds);
      const core = new EngineCore({
        ...base,
        engineHashSeed: BigInt.asUintN(64, eng.engineHashSeed + BigInt(workerId)),
      });
      const ve = new VirtualEngine(core, {
        keepRecords: false,
        onStep: (r: StepResult) => {
          if (r.kvEvents.length > 0) pool.router.applyKvEvents(workerId, r.kvEvents);
        },
      });
      engines[workerId] = { workerId, row, pool, ve };
    });
  }
  return engines;
}
