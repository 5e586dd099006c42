/**
 * Kubernetes discovery: a model's `kubernetes` section (the Service whose
 * EndpointSlices list its engines) and the worker one ready endpoint becomes.
 *
 * A worker's fields come from the EndpointSlice's labels or annotations (the
 * EndpointSlice controller copies the Service's labels onto its slices):
 * `kvgate.io/role` (aggregated, prefill, decode; default aggregated),
 * `kvgate.io/dp-size` (default 1), `kvgate.io/kv-events-port` (the engine's
 * ZMQ KV-event port on the endpoint's address; none by default) and
 * `kvgate.io/bootstrap-port` (an SGLang prefill worker's bootstrap port). Its
 * taints (what `nvext.routing_constraints` matches) are the names of its
 * `taint.kvgate.io/<taint>` labels (a label value cannot hold a list; the value
 * is ignored unless it is `false`) and the comma-separated `kvgate.io/taints`
 * annotation. The
 * URL is `http://<address>:<port>`, the port being the slice's port named
 * `port_name` (its first port when unset). A worker is validated as a config
 * worker is; one with any problem is refused whole.
 */
import { kvEventsEnabled } from '../core/index.js';
import { configProblemsError } from './load.js';
import { readEtcdWorkerValue } from './etcd.js';
import type { ModelConfig, WorkerConfig } from './types.js';

/** The labels (or annotations) kvgate reads on a Service's EndpointSlices. */
const ROLE = 'kvgate.io/role';
const DP_SIZE = 'kvgate.io/dp-size';
/** Also read on an InferencePool's pods by `kvgate picker`. */
export const KV_EVENTS_PORT = 'kvgate.io/kv-events-port';
const BOOTSTRAP_PORT = 'kvgate.io/bootstrap-port';
const TAINTS = 'kvgate.io/taints';
const TAINT_LABEL_PREFIX = 'taint.kvgate.io/';

/** What one endpoint of a slice says about its engine: its address, and the slice's labels, annotations and HTTP port. */
export interface KubernetesEndpoint {
  readonly address: string;
  readonly port: number;
  readonly labels: Readonly<Record<string, string>>;
  readonly annotations: Readonly<Record<string, string>>;
}

/**
 * The worker `id` of `model` an endpoint becomes.
 * @throws KvgateError KVG_ERR_INVALID_CONFIG listing every problem (`detail.problems`) under `source`.
 */
export function kubernetesWorker(model: ModelConfig, id: number, e: KubernetesEndpoint, source: string): WorkerConfig {
  const tag = (k: string): string | undefined => e.labels[k] ?? e.annotations[k];
  const host = e.address.includes(':') ? `[${e.address}]` : e.address;
  const value: Record<string, unknown> = { url: `http://${host}:${e.port}` };
  const number = (k: string): unknown => (/^\d+$/.test(tag(k) ?? '') ? Number(tag(k)) : tag(k));
  if (tag(ROLE) !== undefined) value.role = tag(ROLE);
  if (tag(DP_SIZE) !== undefined) value.dp_size = number(DP_SIZE);
  if (tag(KV_EVENTS_PORT) !== undefined) value.kv_events = `tcp://${host}:${tag(KV_EVENTS_PORT)}`;
  if (tag(BOOTSTRAP_PORT) !== undefined) value.bootstrap_port = number(BOOTSTRAP_PORT);
  const taints = endpointTaints(e);
  if (taints.length > 0) value.taints = taints;
  const { worker, problems } = readEtcdWorkerValue(value, id, model, model.engine, source);
  if (
    worker !== undefined &&
    worker.kvEvents === undefined &&
    model.routerMode === 'kv' &&
    kvEventsEnabled(model.router)
  ) {
    problems.push({
      source,
      path: KV_EVENTS_PORT,
      reason:
        'is required in router_mode kv with KV events on; set it, or set router.use_kv_events: false (approximate mode)',
    });
  }
  if (worker === undefined || problems.length > 0) throw configProblemsError(problems, 'the endpoint is not routed to');
  return worker;
}

/** An endpoint's taints: its `taint.kvgate.io/<taint>` labels (not `false`), then the `kvgate.io/taints` list. */
function endpointTaints(e: KubernetesEndpoint): string[] {
  const out = Object.entries(e.labels)
    .filter(([k, v]) => k.startsWith(TAINT_LABEL_PREFIX) && v !== 'false')
    .map(([k]) => k.slice(TAINT_LABEL_PREFIX.length));
  const listed = e.annotations[TAINTS] ?? e.labels[TAINTS];
  if (listed !== undefined) for (const t of listed.split(',')) if (t.trim() !== '') out.push(t.trim());
  return out;
}
