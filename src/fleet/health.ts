/**
 * The fleet's health checking, one of each for the whole gateway: the ejection
 * ledger (with each model's panic threshold), the outlier detector on dispatch
 * errors and the health prober. Prober and detector share the ledger, so failed
 * probes and dispatch errors eject under the same per-model limit, and a pool
 * below its model's `panic_threshold_percent` keeps routing to all its workers
 * (src/discovery).
 */
import type { GatewayConfig } from '../config/index.js';
import {
  Ejections,
  HealthProber,
  OutlierDetector,
  type ModelCheck,
  type WorkerInfo,
  type WorkerRegistry,
} from '../discovery/index.js';

export interface FleetHealth {
  readonly prober: HealthProber;
  readonly outliers: OutlierDetector;
}

/** The prober (not started) and the detector over `registry`; `onModelCheck` hears each engine's model-check outcome. */
export function fleetHealth(
  config: GatewayConfig,
  registry: WorkerRegistry,
  onModelCheck: (w: WorkerInfo, check: ModelCheck) => void,
): FleetHealth {
  const ejections = new Ejections(registry, config.health.maxEjectedPercent);
  for (const m of config.models) ejections.setPanicThreshold(m.name, m.panicThresholdPercent);
  const outliers = new OutlierDetector(registry, ejections, config.health.outlierDetection);
  const prober = new HealthProber(registry, { ...config.health, ejections, onModelCheck });
  return { prober, outliers };
}
