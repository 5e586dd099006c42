/**
 * The data-parallel ranks of one mocker worker: each an EngineCore driven in
 * real time, with its own KV-event publisher (PUB port + rank, optional
 * replay ROUTER port + rank). This file opens a rank and picks the rank a
 * request runs on; the worker owns the list.
 */
import { KvgateError } from '../errors/index.js';
import { EngineCore } from './engine.js';
import type { StepResult } from './engine-types.js';
import type { FaultController } from './faults.js';
import { KvEventPublisher } from './kv-publisher.js';
import { engineCoreOptions, type FilledMockerOptions } from './options.js';
import { RealtimeEngine } from './realtime-engine.js';

export interface EngineRank {
  readonly index: number;
  readonly core: EngineCore;
  readonly engine: RealtimeEngine;
  readonly publisher: KvEventPublisher | undefined;
}

/** Ports of a previous bring-up, reused on restart (undefined at first start: the configured ones). */
export interface RankPorts {
  readonly events: readonly number[];
  readonly replay: readonly number[];
}

/**
 * Opens rank `i`: a fresh core and, with KV events on, its publisher bound
 * (the engine is not started). `onStep` sees every step the engine runs.
 * @throws socket errors as zeromq reports them (EADDRINUSE).
 */
export async function openRank(
  o: FilledMockerOptions,
  i: number,
  sampleIds: Uint32Array,
  faults: FaultController,
  ports: RankPorts | undefined,
  onStep: (rank: EngineRank, r: StepResult) => void,
): Promise<EngineRank> {
  const core = new EngineCore(engineCoreOptions(o, sampleIds, i));
  let publisher: KvEventPublisher | undefined;
  if (o.kvEvents) {
    publisher = await KvEventPublisher.bind({
      host: o.host,
      port: ports?.events[i] ?? (o.kvEventsPort > 0 ? o.kvEventsPort + i : 0),
      replayPort:
        o.kvEventsReplayPort === undefined
          ? undefined
          : (ports?.replay[i] ?? (o.kvEventsReplayPort > 0 ? o.kvEventsReplayPort + i : 0)),
      topic: o.kvEventsTopic,
      rank: i,
      bufferSteps: o.kvEventsBufferSteps,
      hwm: o.kvEventsHwm,
      encoding: { encoding: o.kvEventsEncoding, flavour: o.engine },
      faults,
    });
  }
  // The engine steps only once started, after `rank` is assigned.
  let rank: EngineRank | undefined;
  const engine = new RealtimeEngine(core, { faults, onStep: (r) => onStep(rank!, r) });
  rank = { index: i, core, engine, publisher };
  return rank;
}

/**
 * The rank a request runs on: the one its protocol fixed, else the one it
 * names (`data_parallel_rank`, then the `x-data-parallel-rank` header), else
 * vLLM's internal DP balancer: the least loaded rank, lowest index on ties.
 * @throws KvgateError KVG_ERR_INVALID_DP_RANK for a rank this worker does not have.
 */
export function pickRank(
  ranks: readonly EngineRank[],
  named: number | undefined,
  header: string | string[] | undefined,
  forced: number | undefined,
): number {
  const fromHeader = typeof header === 'string' && /^\d+$/.test(header) ? Number(header) : undefined;
  const rank = forced ?? named ?? fromHeader;
  if (rank !== undefined) {
    if (rank >= ranks.length) {
      throw new KvgateError(
        'KVG_ERR_INVALID_DP_RANK',
        `data-parallel rank ${rank} does not exist (dp_size ${ranks.length})`,
        { param: 'data_parallel_rank' },
      );
    }
    return rank;
  }
  let best = 0;
  for (let i = 1; i < ranks.length; i++) if (ranks[i]!.engine.load < ranks[best]!.engine.load) best = i;
  return best;
}
